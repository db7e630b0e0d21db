// Package e2e runs real palyra processes, driven only through the CLI as a
// user would: crash recovery under SIGKILL, what the node exposes on the
// network, and who it lets in.
package e2e
