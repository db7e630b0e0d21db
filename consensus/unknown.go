package consensus

import (
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// unknownIn returns where in m a field this software does not know is set
// ("" if none): an entry written by a newer node (or read back from a
// snapshot a newer node wrote) that this node will apply without that
// field, and so maybe differently from the others. Lists are looked at in
// their first element only (their elements come from one writer), so the
// walk stays small beside decoding the entry; the path is built only when
// something is found.
func unknownIn(m protoreflect.Message, path string) string {
	if len(m.GetUnknown()) > 0 {
		return path
	}
	found := ""
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			if l := v.List(); fd.Message() != nil && l.Len() > 0 {
				if hasUnknown(l.Get(0).Message()) {
					found = unknownIn(l.Get(0).Message(), path+"."+string(fd.Name())+"[0]")
				}
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					found = unknownIn(mv.Message(), path+"."+string(fd.Name())+"{}")
					return found == ""
				})
			}
		case fd.Message() != nil:
			if hasUnknown(v.Message()) {
				found = unknownIn(v.Message(), path+"."+string(fd.Name()))
			}
		}
		return found == ""
	})
	return found
}

// hasUnknown reports whether m or a message in it carries an unknown
// field (unknownIn without the path).
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			if l := v.List(); fd.Message() != nil && l.Len() > 0 {
				found = hasUnknown(l.Get(0).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					found = hasUnknown(mv.Message())
					return !found
				})
			}
		case fd.Message() != nil:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// unknownLog says, at most once a minute, that this node applied entries
// with fields its software does not know.
type unknownLog struct {
	log    *slog.Logger
	mu     sync.Mutex
	last   time.Time
	missed int
}

func (u *unknownLog) report(index uint64, where string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if time.Since(u.last) < time.Minute {
		u.missed++
		return
	}
	u.log.Error("applied a raft entry with fields this node's software does not know: a newer node wrote it, and this node may apply it differently from the others (its state can diverge); upgrade this node now ('palyra nodes' shows each node's version)",
		"index", index, "field", where, "more_since_last", u.missed)
	u.last, u.missed = time.Now(), 0
}
