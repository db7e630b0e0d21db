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
