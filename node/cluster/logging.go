package cluster

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newStdLogger adapts memberlist's *log.Logger to slog: memberlist writes
// lines like "[WARN] memberlist: message", which are re-emitted at their level.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(&levelWriter{l: l}, "", 0)
}

type levelWriter struct{ l *slog.Logger }

var levelTags = []struct {
	tag   string
	level slog.Level
}{
	{"[TRACE]", slog.LevelDebug - 4}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError},
}

func (w *levelWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		level := slog.LevelInfo
		for _, t := range levelTags {
			if strings.HasPrefix(s, t.tag) {
				level, s = t.level, strings.TrimSpace(strings.TrimPrefix(s, t.tag))
				break
			}
		}
		s = ourTransport(strings.TrimPrefix(s, "memberlist: "))
		if level == slog.LevelError && expectedGossipError(s) {
			level = slog.LevelWarn
		}
		w.l.Log(context.Background(), level, s)
	}
	return len(p), nil
}

// ourTransport rewords memberlist's lines about TCP and UDP: here its
// probes travel as QUIC datagrams and its fallback over a QUIC stream, on
// the node's one UDP port (a trial read "network may be misconfigured"
// about TCP in a product that uses none).
func ourTransport(s string) string {
	if before, _, ok := strings.Cut(s, " over TCP but UDP probes failed"); ok {
		return before + " over a stream, but its datagram probes went unanswered (datagrams lost, or a busy node)"
	}
	return s
}

// hcLogger adapts raft-autopilot's hclog.Logger to slog: its key/value
// arguments become slog attributes.
type hcLogger struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hcLogger)(nil)

func newHCLogger(l *slog.Logger, name string) hclog.Logger {
	return &hcLogger{l: l.With("component", name), name: name}
}

func toSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	h.l.Log(context.Background(), toSlog(level), msg, args...)
}
func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), toSlog(level))
}
func (h *hcLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcLogger) ImpliedArgs() []any { return h.args }
func (h *hcLogger) With(args ...any) hclog.Logger {
	return &hcLogger{l: h.l.With(args...), name: h.name, args: append(append([]any(nil), h.args...), args...)}
}
func (h *hcLogger) Name() string { return h.name }
func (h *hcLogger) Named(name string) hclog.Logger {
	n := name
	if h.name != "" {
		n = h.name + "." + name
	}
	return &hcLogger{l: h.l.With("logger", n), name: n, args: h.args}
}
func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{l: h.l.With("logger", name), name: name, args: h.args}
}

// SetLevel is ignored: the slog handler decides what is shown.
func (h *hcLogger) SetLevel(hclog.Level) {}
func (h *hcLogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(lv) {
			return lv
		}
	}
	return hclog.Error
}
func (h *hcLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return newStdLogger(h.l)
}
func (h *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &levelWriter{l: h.l}
}

// expectedGossipError reports a memberlist error that a healthy cluster
// meets in its normal course (a probe of a peer that is stopping or busy,
// a stream cut by a peer's clean stop): worth a warning, not an error.
// Failure detection itself reports what matters (a member marked dead).
func expectedGossipError(msg string) bool {
	for _, s := range []string{"Failed fallback", "Failed to send", "Failed to receive", "Failed push/pull", "use of closed", "EOF", "Push/Pull with"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
