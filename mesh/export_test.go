package mesh

// KillForTest ends tr as a SIGKILL would: its socket closes and no peer
// is told (no CONNECTION_CLOSE goes out).
func KillForTest(tr *Transport) { tr.udp.Close() }
