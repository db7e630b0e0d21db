package consensus

import (
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// openBolt opens the raft log and stable store. The freelist is not
// written on every commit (NoFreelistSync: bbolt rebuilds it by scanning
// the file when it opens, as etcd configures it): a raft log commits at
// every batch, and writing the freelist page each time is a second
// dirty page per transaction for nothing the log needs. The map freelist
// keeps allocation cheap in a file with many free pages.
func openBolt(path string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{
		Timeout:        5 * time.Second,
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	}})
}
