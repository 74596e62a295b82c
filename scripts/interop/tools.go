//go:build tools

// The go-gtp gw-tester programs interop.sh builds; importing them here pins their
// dependencies in go.mod and go.sum (`go build` runs with -mod=readonly).
package tools

import (
	_ "github.com/wmnsk/go-gtp/examples/gw-tester/enb"
	_ "github.com/wmnsk/go-gtp/examples/gw-tester/mme"
	_ "github.com/wmnsk/go-gtp/examples/gw-tester/pgw"
	_ "github.com/wmnsk/go-gtp/examples/gw-tester/sgw"
)
