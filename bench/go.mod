module github.com/ffgen/ffgen/bench

go 1.26.0

require (
	github.com/ffgen/ffgen v0.0.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dave/jennifer v1.7.1 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
	go.etcd.io/raft/v3 v3.7.0 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

tool github.com/ffgen/ffgen/cmd/ffgen

replace github.com/ffgen/ffgen => ..
