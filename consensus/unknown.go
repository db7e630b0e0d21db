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
// field (unknownIn without the path). It runs for every entry applied, so
// it visits only the fields that can hold a message (from a plan made
// once per message type) instead of ranging over every field set.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	p := planOf(m.Descriptor())
	for _, fd := range p.single {
		if m.Has(fd) && hasUnknown(m.Get(fd).Message()) {
			return true
		}
	}
	for _, od := range p.oneofs {
		if fd := m.WhichOneof(od); fd != nil && fd.Message() != nil && hasUnknown(m.Get(fd).Message()) {
			return true
		}
	}
	for _, fd := range p.lists {
		if l := m.Get(fd).List(); l.Len() > 0 && hasUnknown(l.Get(0).Message()) {
			return true
		}
	}
	for _, fd := range p.maps {
		found := false
		m.Get(fd).Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
			found = hasUnknown(mv.Message())
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// messagePlan lists the fields of one message type that can hold a
// message: singular ones, oneofs with a message member, repeated ones and
// maps with message values.
type messagePlan struct {
	single, lists, maps []protoreflect.FieldDescriptor
	oneofs              []protoreflect.OneofDescriptor
}

// plans holds a messagePlan per message descriptor.
var plans sync.Map

func planOf(md protoreflect.MessageDescriptor) *messagePlan {
	if p, ok := plans.Load(md); ok {
		return p.(*messagePlan)
	}
	p := &messagePlan{}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				p.maps = append(p.maps, fd)
			}
		case fd.Message() == nil:
		case fd.IsList():
			p.lists = append(p.lists, fd)
		case fd.ContainingOneof() == nil || fd.ContainingOneof().IsSynthetic():
			p.single = append(p.single, fd)
		}
	}
	oneofs := md.Oneofs()
	for i := 0; i < oneofs.Len(); i++ {
		od := oneofs.Get(i)
		if od.IsSynthetic() {
			continue
		}
		for j := 0; j < od.Fields().Len(); j++ {
			if od.Fields().Get(j).Message() != nil {
				p.oneofs = append(p.oneofs, od)
				break
			}
		}
	}
	plans.Store(md, p)
	return p
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
