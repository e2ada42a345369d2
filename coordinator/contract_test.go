package coordinator_test

import (
	"testing"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/coordinator/etcdtest"
	"github.com/cairn-db/cairn/coordinator/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) coordinator.Store {
		s := coordinator.NewMemoryStore()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestEtcdStoreContract(t *testing.T) {
	m := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T) coordinator.Store { return m.Store(t) })
}
