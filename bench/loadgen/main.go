// Command loadgen is the webhook benchmark's native load generator (standard library only).
//
// It POSTs request bodies (one per line of -bodies, sent in turn) over HTTPS to -url at a fixed open-loop
// rate from -conns keep-alive connections, and prints one JSON object with latency percentiles and the
// achieved rate. A Go client is used so that the client's own scheduling jitter (a Python event loop on the
// same 2 cores) is not what gets measured.
//
// Open loop: request i is due at start + i/rate whatever happened before it. When every connection is busy
// the request waits for one, and that wait counts: "scheduled" latency runs from the due time to the end of
// the response (coordinated omission is not hidden); "sent" latency runs from the moment the request was
// handed to its connection. "dispatch_lag" is how late the client itself released requests (its timer);
// when it is large the client, not the server, was the bottleneck.
//
//	loadgen -url https://127.0.0.1:9443/mutate -ca ca.crt -bodies bodies.ndjson -rate 500 -duration 10s -conns 64
//
// -rate 0 sends -requests requests as fast as the connections allow (closed loop, for maximum throughput).
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is what the flags say.
type config struct {
	url      string
	caFile   string
	bodies   string
	rate     float64
	duration time.Duration
	requests int
	conns    int
	warmup   int
	timeout  time.Duration
	expect   string
	profile  string
	pid      int
}

// sample is one request's timeline, as offsets from the start of the run.
type sample struct {
	planned  time.Duration
	released time.Duration
	sent     time.Duration
	done     time.Duration
	ok       bool
}

// summary is a latency distribution in milliseconds.
type summary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// report is the JSON printed at the end.
type report struct {
	TargetRate   float64 `json:"target_rate"`
	AchievedRate float64 `json:"achieved_rate"`
	Requests     int     `json:"requests"`
	OK           int     `json:"ok"`
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	Conns        int     `json:"conns"`
	Seconds      float64 `json:"seconds"`
	Scheduled    summary `json:"scheduled_ms"`
	Sent         summary `json:"sent_ms"`
	DispatchLag  summary `json:"dispatch_lag_ms"`
	ClientCPU    float64 `json:"client_cpu_seconds"`
	ServerCPU    float64 `json:"server_cpu_seconds"`
	Unpaced      bool    `json:"unpaced"`
}

func parseFlags() config {
	var c config
	flag.StringVar(&c.url, "url", "", "endpoint, e.g. https://127.0.0.1:9443/mutate")
	flag.StringVar(&c.caFile, "ca", "", "PEM file of the CA that signed the server's certificate")
	flag.StringVar(&c.bodies, "bodies", "", "file with one request body per line (sent in turn)")
	flag.Float64Var(&c.rate, "rate", 500, "requests per second (0: as fast as the connections allow)")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "length of a paced run")
	flag.IntVar(&c.requests, "requests", 0, "number of requests (default: rate x duration; required with -rate 0)")
	flag.IntVar(&c.conns, "conns", 64, "concurrent keep-alive connections")
	flag.IntVar(&c.warmup, "warmup", 5, "untimed requests per connection before the run (opens the connections)")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Second, "per-request timeout")
	flag.StringVar(&c.expect, "expect", "", "a response body must contain this text to count as OK")
	flag.StringVar(&c.profile, "cpuprofile", "", "write the client's CPU profile of the timed run here")
	flag.IntVar(&c.pid, "pid", 0, "also report the CPU this process (the server) used during the timed run")
	flag.Parse()
	if c.requests == 0 && c.rate > 0 {
		c.requests = int(math.Round(c.rate * c.duration.Seconds()))
	}
	return c
}

func readBodies(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]byte
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		if line := bytes.TrimSpace(scanner.Bytes()); len(line) > 0 {
			out = append(out, slices.Clone(line))
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New(path + " has no request bodies")
	}
	return out, nil
}

// newClient is one HTTP/1.1 client holding exactly one keep-alive connection.
func newClient(c config, tlsConfig *tls.Config) *http.Client {
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		MaxConnsPerHost:     1,
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: transport, Timeout: c.timeout}
}

func tlsConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New(caFile + " holds no PEM certificate")
	}
	return &tls.Config{RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(0)}, nil
}

// post sends one body and reads the whole answer; nil when it is a 200 containing expect.
func post(client *http.Client, url string, body []byte, expect string) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	payload, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, payload)
	}
	if expect != "" && !bytes.Contains(payload, []byte(expect)) {
		return fmt.Errorf("the answer lacks %q: %.200s", expect, payload)
	}
	return nil
}

// warm opens every connection (TLS handshake) and sends a few untimed requests on each.
func warm(c config, clients []*http.Client, bodies [][]byte) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for w, client := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < c.warmup && errs[w] == nil; i++ {
				errs[w] = post(client, c.url, bodies[(w+i)%len(bodies)], c.expect)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err // the first is enough: the others are alike
		}
	}
	return nil
}

// errorBox keeps the first error seen by any worker.
type errorBox struct {
	once  sync.Once
	first string
}

func (b *errorBox) set(err error) { b.once.Do(func() { b.first = err.Error() }) }

// run releases requests on schedule to the workers and returns every request's timeline.
func run(c config, clients []*http.Client, bodies [][]byte, box *errorBox) ([]sample, time.Duration) {
	samples := make([]sample, c.requests)
	jobs := make(chan int, c.requests)
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	for _, client := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				s := &samples[i]
				s.sent = time.Since(start)
				err := post(client, c.url, bodies[i%len(bodies)], c.expect)
				s.done = time.Since(start)
				s.ok = err == nil
				if err != nil {
					box.set(err)
				}
			}
		}()
	}
	preparePacer()
	for i := range samples {
		if c.rate > 0 {
			samples[i].planned = time.Duration(float64(i) * float64(time.Second) / c.rate)
			sleepUntil(start.Add(samples[i].planned))
		} else {
			samples[i].planned = max(time.Since(start), 0)
		}
		samples[i].released = time.Since(start)
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return samples, time.Since(start)
}

// distribution summarises durations (nearest-rank percentiles) in milliseconds.
func distribution(values []time.Duration) summary {
	if len(values) == 0 {
		return summary{}
	}
	slices.Sort(values)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(values)))) - 1
		return ms(values[min(max(i, 0), len(values)-1)])
	}
	var total time.Duration
	for _, v := range values {
		total += v
	}
	return summary{
		P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), P999: rank(0.999),
		Max: ms(values[len(values)-1]), Mean: ms(total / time.Duration(len(values))),
	}
}

// startProfile starts a CPU profile into path (none when path is empty); call the result to stop it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// processCPUSeconds is the user + system CPU time of process pid so far, from /proc (Linux; 0 elsewhere or
// for pid 0). Fields 14 and 15 of /proc/PID/stat count clock ticks of 1/100 s (USER_HZ).
func processCPUSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return 0
	}
	user, errUser := strconv.ParseFloat(fields[11], 64)
	system, errSystem := strconv.ParseFloat(fields[12], 64)
	if errUser != nil || errSystem != nil {
		return 0
	}
	return (user + system) / 100
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return math.NaN()
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

func summarise(c config, samples []sample, elapsed time.Duration, box *errorBox, cpu float64) report {
	var scheduled, sent, lag []time.Duration
	var last time.Duration
	ok := 0
	for _, s := range samples {
		last = max(last, s.done)
		lag = append(lag, s.released-s.planned)
		if !s.ok {
			continue
		}
		ok++
		scheduled = append(scheduled, s.done-s.planned)
		sent = append(sent, s.done-s.sent)
	}
	if last <= 0 {
		last = elapsed
	}
	return report{
		TargetRate: c.rate, AchievedRate: math.Round(float64(len(samples))/last.Seconds()*10) / 10,
		Requests: len(samples), OK: ok, Errors: len(samples) - ok, FirstError: box.first,
		Conns: c.conns, Seconds: math.Round(last.Seconds()*1000) / 1000,
		Scheduled: distribution(scheduled), Sent: distribution(sent), DispatchLag: distribution(lag),
		ClientCPU: math.Round(cpu*1000) / 1000, Unpaced: c.rate <= 0,
	}
}

func main() {
	c := parseFlags()
	if err := mainErr(c); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func mainErr(c config) error {
	if c.url == "" || c.caFile == "" || c.bodies == "" {
		return errors.New("-url, -ca and -bodies are required")
	}
	if c.requests <= 0 || c.conns <= 0 {
		return errors.New("-requests (or -rate and -duration) and -conns must be positive")
	}
	bodies, err := readBodies(c.bodies)
	if err != nil {
		return err
	}
	tlsCfg, err := tlsConfig(c.caFile)
	if err != nil {
		return err
	}
	clients := make([]*http.Client, c.conns)
	for i := range clients {
		clients[i] = newClient(c, tlsCfg)
	}
	if err := warm(c, clients, bodies); err != nil {
		return fmt.Errorf("warm-up failed: %w", err)
	}
	box := &errorBox{}
	stop, err := startProfile(c.profile)
	if err != nil {
		return err
	}
	cpuBefore, serverBefore := cpuSeconds(), processCPUSeconds(c.pid)
	samples, elapsed := run(c, clients, bodies, box)
	stop()
	out := summarise(c, samples, elapsed, box, cpuSeconds()-cpuBefore)
	if c.pid > 0 {
		out.ServerCPU = math.Round((processCPUSeconds(c.pid)-serverBefore)*1000) / 1000
	}
	encoder := json.NewEncoder(os.Stdout)
	return encoder.Encode(out)
}
