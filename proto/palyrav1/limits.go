package palyrav1

// Limits every node enforces on a submission. Clients check them before
// sending, so a payload too large for the transport gets the same clear
// error as one just over the limit, not a transport's raw refusal.
const (
	MaxModuleBytes = 16 << 20
	MaxInputBytes  = 1 << 20 // per job, and per task of an array
	// MaxArrayInputBytes bounds the inputs of one array request, all
	// tasks together; larger work is split into several arrays.
	MaxArrayInputBytes = 64 << 20
)

// Defaults a wasm job, and a skill's run, gets for a limit left at zero
// (a skill manifest without fuel, memory_mib or wall_clock_ms). Clients
// show them; node/api and runtime/wasm apply them (a test holds them
// equal).
const (
	DefaultMemoryBytes uint64 = 64 << 20
	DefaultTimeoutMs   int64  = 30_000
	DefaultFuel        uint64 = 10_000_000_000
	// DefaultMaxOutputBytes bounds stdout and stderr, each, of a job
	// without max_output_bytes (runtime/wasm and runtime/browser apply it).
	DefaultMaxOutputBytes uint64 = 1 << 20
)
