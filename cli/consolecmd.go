package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/cli/console"
)

func consoleCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "console",
		Usage: "serve the web console on this machine, acting with this machine's operator credential",
		Description: `Serves a web UI on loopback that talks to the cluster as you (the credential
   the other commands use), as 'kubectl proxy' does: nodes, jobs and arrays
   updating live, a job's output and screenshots, pending reasons, pairing
   codes with QR codes, devices and revocation, the policy, and charts of
   throughput and queue depth. It prints a URL with a one-time token; open
   it in a browser on this machine (from elsewhere: ssh -L 7480:127.0.0.1:7480 HOST).
   Everything is built into the binary; nothing is fetched.

   Example:
     palyra --data-dir /var/lib/palyra console
     palyra console --listen 127.0.0.1:9000`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "listen", Value: "127.0.0.1:7480", Usage: "loopback `HOST:PORT` to serve on (port 0: any free port)"},
		},
		Action: func(c *ucli.Context) error {
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			ln, err := console.Listen(c.String("listen"))
			if err != nil {
				return fail(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("--listen %s: %v", c.String("listen"), err)})
			}
			srv, err := console.New(cl, nil)
			if err != nil {
				return err
			}
			addr := ln.Addr().String()
			hs := &http.Server{Handler: srv.Handler(addr), ReadHeaderTimeout: 10 * time.Second}
			ctx, cancel := context.WithCancel(c.Context)
			defer cancel()
			go srv.Run(ctx)
			fmt.Fprintf(c.App.Writer, "Palyra console: http://%s/?token=%s\n", addr, srv.Token())
			fmt.Fprintln(c.App.ErrWriter, "serving on loopback with your operator credential; Ctrl-C stops it")
			done := make(chan error, 1)
			go func() { done <- hs.Serve(ln) }()
			select {
			case <-ctx.Done():
				sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer scancel()
				hs.Shutdown(sctx)
				return nil
			case err := <-done:
				if errors.Is(err, http.ErrServerClosed) {
					return nil
				}
				return fail(c, &client.Error{Code: "internal", Message: err.Error()})
			}
		},
	}
}
