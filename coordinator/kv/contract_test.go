package kv_test

import (
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/coordinator/kv/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) kv.Store {
		s := kv.NewMemoryStore()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestEtcdStoreContract(t *testing.T) {
	m := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T) kv.Store { return m.Store(t) })
}
