//go:build tools

// Package tools pins the PFCP simulator the interop suite's row 5 runs.
package tools

import (
	_ "github.com/omec-project/pfcpsim/cmd/pfcpctl"
	_ "github.com/omec-project/pfcpsim/cmd/pfcpsim"
)
