package grpctransport

//go:generate protoc --proto_path=internal/wirepb --go_out=internal/wirepb --go_opt=paths=source_relative --go-grpc_out=internal/wirepb --go-grpc_opt=paths=source_relative wire.proto
