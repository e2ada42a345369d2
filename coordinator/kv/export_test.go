package kv

import clientv3 "go.etcd.io/etcd/client/v3"

// EtcdClient is the store's raw client, for tests that set up etcd itself
// (users, authentication) before Cairn connects.
func EtcdClient(s *EtcdStore) *clientv3.Client { return s.cli }
