package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestDistributionUsesNearestRank(t *testing.T) {
	var values []time.Duration
	for i := 1; i <= 1000; i++ {
		values = append(values, time.Duration(i)*time.Millisecond)
	}
	got := distribution(values)
	want := summary{P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000, Mean: 500.5}
	if got != want {
		t.Fatalf("distribution = %+v, want %+v", got, want)
	}
	if empty := distribution(nil); empty != (summary{}) {
		t.Fatalf("distribution(nil) = %+v", empty)
	}
}

func TestReadBodiesSkipsBlankLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bodies")
	if err := os.WriteFile(path, []byte("{\"a\":1}\n\n  \n{\"b\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bodies, err := readBodies(path)
	if err != nil || len(bodies) != 2 || string(bodies[1]) != `{"b":2}` {
		t.Fatalf("readBodies = %q, %v", bodies, err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readBodies(path); err == nil {
		t.Fatal("a file without bodies is accepted")
	}
}

// A paced run against a TLS server that answers in 3 ms or more: every request is timed, and the latency
// from the scheduled send is never below the one from the actual send (no assertion on speed).
func TestPacedRunOverTLS(t *testing.T) {
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * time.Millisecond)
		_, _ = w.Write([]byte(`{"response":{"allowed":true}}`))
	}))
	defer server.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	bodies := filepath.Join(dir, "bodies")
	if os.WriteFile(ca, block, 0o600) != nil || os.WriteFile(bodies, []byte("{}\n"), 0o600) != nil {
		t.Fatal("cannot write the test files")
	}
	c := config{url: server.URL, caFile: ca, bodies: bodies, rate: 200, requests: 100, conns: 4, warmup: 1,
		timeout: 5 * time.Second, expect: `"allowed":true`}
	tlsCfg, err := tlsConfig(ca)
	if err != nil {
		t.Fatal(err)
	}
	clients := []*http.Client{newClient(c, tlsCfg), newClient(c, tlsCfg), newClient(c, tlsCfg), newClient(c, tlsCfg)}
	payloads, _ := readBodies(bodies)
	if err := warm(c, clients, payloads); err != nil {
		t.Fatal(err)
	}
	box := &errorBox{}
	samples, elapsed := run(c, clients, payloads, box)
	out := summarise(c, samples, elapsed, box, 0)
	if out.OK != 100 || out.Errors != 0 {
		t.Fatalf("ok=%d errors=%d first=%q", out.OK, out.Errors, out.FirstError)
	}
	if out.Requests != 100 || out.AchievedRate <= 0 {
		t.Fatalf("requests=%d achieved=%.1f/s", out.Requests, out.AchievedRate)
	}
	if out.Sent.P50 < 3 || out.Scheduled.P50 < out.Sent.P50 || out.Scheduled.Max < out.Sent.Max {
		t.Fatalf("scheduled %+v, sent %+v", out.Scheduled, out.Sent)
	}
}

func TestProcessCPUSecondsReadsProc(t *testing.T) {
	if processCPUSeconds(0) != 0 {
		t.Fatal("pid 0 must give 0")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	first := processCPUSeconds(os.Getpid())
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	if later := processCPUSeconds(os.Getpid()); later < first || later <= 0 {
		t.Fatalf("CPU seconds went from %v to %v", first, later)
	}
}
