module mobicore.local/interop/pfcpsim

go 1.24.0

require github.com/omec-project/pfcpsim v1.4.0

require (
	github.com/urfave/cli/v3 v3.6.2 // indirect
	github.com/wmnsk/go-pfcp v0.0.24 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.1 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/grpc v1.79.1 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
