module kube-queue-py/bench/loadgen

go 1.22
