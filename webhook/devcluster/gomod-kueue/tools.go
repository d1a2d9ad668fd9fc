//go:build tools

// Package tools pins the Kueue manager the peer benchmark builds.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
