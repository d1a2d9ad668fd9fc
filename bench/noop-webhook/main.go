// Command noop-webhook is the least an admission webhook can cost: it allows every request at once, and on
// /mutate answers with a one-operation JSONPatch (one annotation), so the API server goes through the same
// steps as for a webhook that holds a job. bench/e2e_bench.py measures Jobs created through two of its calls
// (mutate, validate) beside ours: the physical limit of a system that admits jobs with webhooks.
//
// Usage: noop-webhook ADDRESS CERT KEY. HTTP/1.1 only, like the service it is compared with.
package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
)

type review struct {
	Request struct {
		UID    string `json:"uid"`
		Object struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"object"`
	} `json:"request"`
}

func answer(w http.ResponseWriter, r *http.Request, mutate bool) {
	body, err := io.ReadAll(r.Body)
	var in review
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil {
		http.Error(w, "bad AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	response := map[string]any{"uid": in.Request.UID, "allowed": true}
	if mutate {
		var op map[string]any
		if in.Request.Object.Metadata.Annotations == nil {
			op = map[string]any{"op": "add", "path": "/metadata/annotations",
				"value": map[string]string{"bench.example/noop": "1"}}
		} else {
			op = map[string]any{"op": "add", "path": "/metadata/annotations/bench.example~1noop", "value": "1"}
		}
		patch, _ := json.Marshal([]any{op})
		response["patchType"] = "JSONPatch"
		response["patch"] = patch // []byte marshals as base64, as the API expects
	}
	out, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: noop-webhook ADDRESS CERT KEY")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) { answer(w, r, true) })
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) { answer(w, r, false) })
	server := &http.Server{
		Addr:         os.Args[1],
		Handler:      mux,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
	}
	log.Fatal(server.ListenAndServeTLS(os.Args[2], os.Args[3]))
}
