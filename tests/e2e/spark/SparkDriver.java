// A Spark application's driver for the Spark end-to-end test (tests/e2e/test_spark_executors.py): it starts a
// SparkContext from the spark.* system properties, which on a k8s:// master makes Spark's own Kubernetes
// scheduler backend create the executor pods, and holds it for the number of seconds its argument gives.
public final class SparkDriver {
    private SparkDriver() {
    }

    public static void main(String[] args) throws Exception {
        org.apache.spark.SparkContext context = new org.apache.spark.SparkContext(new org.apache.spark.SparkConf());
        try {
            Thread.sleep(Long.parseLong(args[0]) * 1000L);
        } finally {
            context.stop();
        }
    }
}
