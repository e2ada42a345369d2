package coordinator

import "go.etcd.io/etcd/api/v3/mvccpb"

type mvccKV = mvccpb.KeyValue
