package grpctransport

// The generated code in internal/wirepb is committed, so building needs no
// protoc. To regenerate it after editing wire.proto, install protoc
// (Debian: protobuf-compiler) and the two plugins at the versions that made
// the committed code:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
// then run go generate ./grpctransport.

//go:generate protoc --proto_path=internal/wirepb --go_out=internal/wirepb --go_opt=paths=source_relative --go-grpc_out=internal/wirepb --go-grpc_opt=paths=source_relative wire.proto
