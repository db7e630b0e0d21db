package wasm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

// testSite is a local HTTP server counting the requests it serves.
type testSite struct {
	*httptest.Server
	hits atomic.Int64
	port string
}

func newTestSite(t *testing.T) *testSite {
	s := &testSite{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s %s", r.Method, r.URL.Path)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 2<<20))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	s.port = s.URL[strings.LastIndexByte(s.URL, ':')+1:]
	return s
}

func TestFetchWithGrant(t *testing.T) {
	site := newTestSite(t)
	e := newExecutor(t, Config{resolver: fakeResolver{"api.example.test": {netip.MustParseAddr("127.0.0.1")}}})
	fetch := buildGuestExample(t, "fetch")

	res := e.Run(context.Background(), runtime.Spec{Module: fetch, Input: []byte(site.URL + "/hello"),
		AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true})
	wantReason(t, res, runtime.ReasonNone)
	if got, want := string(res.Stdout), "status 200\nhello from GET /hello"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}

	// A subdomain of an allowed name, resolved, connected to the address
	// that was checked.
	res = e.Run(context.Background(), runtime.Spec{Module: fetch, Input: []byte("http://api.example.test:" + site.port + "/sub"),
		AllowHosts: []string{"example.test"}, AllowPrivate: true})
	wantReason(t, res, runtime.ReasonNone)
	if got := string(res.Stdout); got != "status 200\nhello from GET /sub" {
		t.Errorf("stdout = %q", got)
	}

	// A redirect within the grants is followed.
	res = e.Run(context.Background(), runtime.Spec{Module: fetch, Input: []byte(site.URL + "/redirect?to=/after"),
		AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true})
	wantReason(t, res, runtime.ReasonNone)
	if got := string(res.Stdout); got != "status 200\nhello from GET /after" {
		t.Errorf("stdout = %q", got)
	}
}

func TestFetchRefusedWithoutGrant(t *testing.T) {
	site := newTestSite(t)
	e := newExecutor(t, Config{resolver: fakeResolver{
		"api.example.test":    {netip.MustParseAddr("127.0.0.1")},
		"evilexample.test":    {netip.MustParseAddr("127.0.0.1")},
		"rebind.example.test": {netip.MustParseAddr("127.0.0.1")},
	}})
	fetch := buildGuestExample(t, "fetch")
	for _, tc := range []struct {
		name    string
		url     string
		hosts   []string
		private bool
		want    string
	}{
		{"no --allow-host", site.URL + "/", nil, true, `host "127.0.0.1" is not allowed: the job has no --allow-host, so no network`},
		{"another host", site.URL + "/", []string{"example.com"}, true, `host "127.0.0.1" is not in the job's --allow-host list`},
		{"suffix is not a subdomain", "http://evilexample.test:" + site.port + "/", []string{"example.test"}, true, `host "evilexample.test" is not in the job's --allow-host list`},
		{"loopback literal without allow_private", site.URL + "/", []string{"127.0.0.1"}, false, "address 127.0.0.1 is loopback; private targets need --allow-private"},
		{"name resolving to loopback", "http://rebind.example.test:" + site.port + "/", []string{"example.test"}, false,
			`host "rebind.example.test" resolves to a refused address: address 127.0.0.1 is loopback`},
		{"redirect to a host outside the grant", site.URL + "/redirect?to=http://localhost:" + site.port + "/", []string{"127.0.0.1"}, true,
			`redirect refused: host "localhost" is not in the job's --allow-host list`},
		{"scheme", "file:///etc/passwd", []string{"127.0.0.1"}, true, `scheme "file" is not allowed; only http and https`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := site.hits.Load()
			res := e.Run(context.Background(), runtime.Spec{Module: fetch, Input: []byte(tc.url), AllowHosts: tc.hosts, AllowPrivate: tc.private})
			wantReason(t, res, runtime.ReasonExitCode, "exited with code 2: fetch: http_fetch: no grant: "+tc.want)
			if strings.Contains(tc.name, "redirect") {
				if n := site.hits.Load() - before; n != 1 {
					t.Errorf("server saw %d requests, want only the redirecting one", n)
				}
			} else if n := site.hits.Load() - before; n != 0 {
				t.Errorf("the refused request reached the server (%d requests)", n)
			}
		})
	}
}

func TestFetchLimits(t *testing.T) {
	site := newTestSite(t)
	fetch := buildGuestExample(t, "fetch")
	grant := func(url string) runtime.Spec {
		return runtime.Spec{Module: fetch, Input: []byte(url), AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true}
	}
	// The guest asks for at most 1 MiB (the SDK's default); the body is 2.
	// (The default call limit: a loaded machine must not turn "too large"
	// into "timed out".)
	res := newExecutor(t, Config{}).Run(context.Background(), grant(site.URL+"/big"))
	wantReason(t, res, runtime.ReasonExitCode, "http_fetch: too large")

	e := newExecutor(t, Config{HostCallTimeout: 300 * time.Millisecond})

	// A hanging server: the call's own limit ends the fetch and the guest
	// gets an error...
	res = e.Run(context.Background(), grant(site.URL+"/hang"))
	wantReason(t, res, runtime.ReasonExitCode, "http_fetch: timed out")

	// ...and the job's timeout ends the run even inside the call.
	long := newExecutor(t, Config{})
	spec := grant(site.URL + "/hang")
	spec.Timeout = 300 * time.Millisecond
	wantReason(t, long.Run(context.Background(), spec), runtime.ReasonTimeout, "timed out after 300ms")
}

func TestSecrets(t *testing.T) {
	const value = "s3cr3t-VALUE-never-shown"
	logs := &logBuffer{}
	e := newExecutor(t, Config{Logger: logs.logger()})
	secret := buildGuestExample(t, "secret")
	grants := &runtime.Grants{SecretNames: []string{"api-token", "missing"}, Secrets: memSecrets{"api-token": []byte(value), "other": []byte(value)}}

	res := e.Run(context.Background(), runtime.Spec{Module: secret, Input: []byte("api-token"), Grants: grants})
	wantReason(t, res, runtime.ReasonNone)
	if want := fmt.Sprintf("len=%d sha256=%x\n", len(value), sha256.Sum256([]byte(value))); string(res.Stdout) != want {
		t.Errorf("stdout = %q, want %q", res.Stdout, want)
	}
	all := everything(res, "")

	for _, tc := range []struct {
		name, secret string
		grants       *runtime.Grants
		want         string
	}{
		{"no grants", "api-token", nil, `exited with code 2: secret: secret_get: no grant: secret "api-token" is not granted to this job`},
		{"name not granted", "other", grants, `exited with code 2: secret: secret_get: no grant: secret "other" is not granted to this job`},
		{"granted but missing", "missing", grants, `exited with code 1: secret: secret_get: not found: secret "missing" does not exist`},
		{"no service", "api-token", &runtime.Grants{SecretNames: []string{"api-token"}}, "secret_get: service unavailable"},
	} {
		res := e.Run(context.Background(), runtime.Spec{Module: secret, Input: []byte(tc.secret), Grants: tc.grants})
		wantReason(t, res, runtime.ReasonExitCode, tc.want)
		all += everything(res, "")
	}
	// A job that prints the value by mistake: its output masks it, the
	// live stream (a tap, what 'job logs -f' reads) too, a value split
	// over two writes included.
	tap := runtime.NewTap()
	res = e.Run(context.Background(), runtime.Spec{Module: secret, Input: []byte("leak api-token"), Grants: grants, Tap: tap})
	wantReason(t, res, runtime.ReasonNone)
	if string(res.Stdout) != "the token is ***, oops\n" || string(res.Stderr) != "***\n" {
		t.Errorf("a printed secret: stdout %q, stderr %q; want it masked", res.Stdout, res.Stderr)
	}
	streamed := tapText(t, tap)
	if !strings.Contains(streamed, "the token is ***, oops") {
		t.Errorf("the live stream %q does not mask the value", streamed)
	}
	all += everything(res, "") + streamed
	all += logs.String()
	if !strings.Contains(logs.String(), "secret_get") {
		t.Fatalf("the executor logged no secret_get records at debug level; the leak check below would prove nothing:\n%s", logs)
	}
	if strings.Contains(all, value) {
		t.Errorf("the secret's value appears in the output, a message or the log:\n%s", all)
	}
}

func TestKV(t *testing.T) {
	e := newExecutor(t, Config{})
	counter := buildGuestExample(t, "kv")
	kv := newMemKV()
	grants := &runtime.Grants{KVPrefix: "jobs/j1/", KV: kv}
	for want := 1; want <= 3; want++ {
		res := e.Run(context.Background(), runtime.Spec{Module: counter, Input: []byte("jobs/j1/count"), Grants: grants})
		wantReason(t, res, runtime.ReasonNone)
		if got := string(res.Stdout); got != fmt.Sprintf("%d\n", want) {
			t.Errorf("run %d printed %q", want, got)
		}
	}
	if v, _ := kv.get("jobs/j1/count"); v != "3" {
		t.Errorf("stored count = %q, want 3", v)
	}
	for _, tc := range []struct {
		name, key string
		grants    *runtime.Grants
		want      string
	}{
		{"no grants", "jobs/j1/count", nil, "exited with code 2: kv: kv_get: no grant: the job has no key-value grant"},
		{"outside the prefix", "jobs/j2/count", grants, `exited with code 2: kv: kv_get: no grant: key "jobs/j2/count" is outside the job's key-value prefix "jobs/j1/"`},
		{"empty key", "", grants, "kv_get: bad request: key must be 1 to 512 bytes, not 0"},
	} {
		res := e.Run(context.Background(), runtime.Spec{Module: counter, Input: []byte(tc.key), Grants: tc.grants})
		wantReason(t, res, runtime.ReasonExitCode, tc.want)
	}
	if _, ok := kv.get("jobs/j2/count"); ok {
		t.Error("a refused job wrote outside its prefix")
	}
}

// TestHostCallErrorsAreCodes calls palyra_v1 directly with bad arguments:
// each gets its error code back, and the guest carries on (no trap).
func TestHostCallErrorsAreCodes(t *testing.T) {
	e := newExecutor(t, Config{})
	name := testData{offset: 100, bytes: []byte("api-token")}
	kvGrant := &runtime.Grants{KVPrefix: "p/", KV: newMemKV(), SecretNames: []string{"api-token"}, Secrets: memSecrets{"api-token": []byte("v")}}
	for _, tc := range []struct {
		name   string
		module []byte
		grants *runtime.Grants
	}{
		{"secret without grant", hostCallModule(abi.FnSecretGet, []int32{100, 9, 200, 16}, i64, int32(abi.CodeNoGrant), name), nil},
		{"secret with grant", hostCallModule(abi.FnSecretGet, []int32{100, 9, 200, 16}, i64, 1, name), kvGrant},
		{"secret too big for the buffer reports its length", hostCallModule(abi.FnSecretGet, []int32{100, 9, 200, 0}, i64, 1, name), kvGrant},
		{"name outside memory", hostCallModule(abi.FnSecretGet, []int32{65530, 9, 200, 16}, i64, int32(abi.CodeMemory)), kvGrant},
		{"output outside memory", hostCallModule(abi.FnSecretGet, []int32{100, 9, 65535, 16}, i64, int32(abi.CodeMemory), name), kvGrant},
		{"empty name", hostCallModule(abi.FnSecretGet, []int32{100, 0, 200, 16}, i64, int32(abi.CodeBadRequest)), kvGrant},
		{"kv_put without grant", hostCallModule(abi.FnKVPut, []int32{100, 9, 200, 1}, i64, int32(abi.CodeNoGrant), name), nil},
		{"kv_delete outside the prefix", hostCallModule(abi.FnKVDelete, []int32{100, 9}, i64, int32(abi.CodeNoGrant), name), kvGrant},
		{"kv_get missing", hostCallModule(abi.FnKVGet, []int32{100, 2, 200, 16}, i64, int32(abi.CodeNotFound), testData{100, []byte("p/")}), kvGrant},
		{"kv_put value too large", hostCallModule(abi.FnKVPut, []int32{100, 2, 0, abi.MaxValue + 1}, i64, int32(abi.CodeTooLarge), testData{100, []byte("p/")}), kvGrant},
		// The store's own limits, as the guest sees them: a value over 64
		// KiB is too large, a key over 512 bytes or with a control
		// character a bad request (they were "service unavailable",
		// which says to retry), and a write the store refuses for good
		// (full) is a bad request too.
		{"kv_put value over the store's 64 KiB", hostCallModule(abi.FnKVPut, []int32{100, 2, 0, 70_000}, i64, int32(abi.CodeTooLarge), testData{100, []byte("p/")}), kvGrant},
		{"kv_put key over 512 bytes", hostCallModule(abi.FnKVPut, []int32{100, 600, 0, 1}, i64, int32(abi.CodeBadRequest), testData{100, []byte("p/" + strings.Repeat("k", 598))}), kvGrant},
		{"kv_put key with an escape", hostCallModule(abi.FnKVPut, []int32{100, 5, 0, 1}, i64, int32(abi.CodeBadRequest), testData{100, []byte("p/\x1b[2")}), kvGrant},
		{"kv_put the store refuses", hostCallModule(abi.FnKVPut, []int32{100, 3, 0, 1}, i64, int32(abi.CodeBadRequest), testData{100, []byte("p/k")}), &runtime.Grants{KVPrefix: "p/", KV: refusingKV{newMemKV()}}},
		{"fetch of garbage", hostCallModule(abi.FnHTTPFetch, []int32{100, 9, 200, 1000}, i64, int32(abi.CodeBadRequest), name), nil},
		{"fetch request length past the limit", hostCallModule(abi.FnHTTPFetch, []int32{0, abi.MaxRequest + 1, 0, 10}, i64, int32(abi.CodeTooLarge)), nil},
		{"no error yet", hostCallModule(abi.FnLastError, []int32{0, 100}, i32, 0), nil},
		{"a module without memory", hostCallModuleNoMemory(abi.FnSecretGet, []int32{100, 9, 200, 16}, i64, int32(abi.CodeMemory)), kvGrant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantReason(t, e.Run(context.Background(), runtime.Spec{Module: tc.module, Grants: tc.grants}), runtime.ReasonNone)
		})
	}
}

func TestInvalidGrantsRefused(t *testing.T) {
	e := newExecutor(t, Config{})
	res := e.Run(context.Background(), runtime.Spec{Module: trivialModule, AllowHosts: []string{"https://example.com/"}})
	wantReason(t, res, runtime.ReasonBlocked, "invalid job grants", "give a bare host like example.com")
	res = e.Run(context.Background(), runtime.Spec{Module: trivialModule, Grants: &runtime.Grants{SecretNames: []string{""}}})
	wantReason(t, res, runtime.ReasonBlocked, "invalid job grants", "granted secret name")
}

func TestValidatePalyraImports(t *testing.T) {
	e := newExecutor(t, Config{})
	ok := hostCallModule(abi.FnKVDelete, []int32{0, 1}, i64, 0)
	if err := e.Validate(context.Background(), ok); err != nil {
		t.Errorf("Validate(kv_delete import) = %v", err)
	}
	for _, tc := range []struct {
		name   string
		module []byte
		want   string
	}{
		{"unknown function", hostCallModule("spawn_process", []int32{0}, i64, 0), "module imports unknown palyra_v1 function palyra_v1.spawn_process"},
		{"wrong signature", hostCallModule(abi.FnKVDelete, []int32{0, 1}, i32, 0), "module imports palyra_v1.kv_delete as (i32 i32) -> (i32), but it is (i32 i32) -> (i64)"},
		{"other module", testModule{
			types:   []funcType{{}},
			imports: []testImport{{module: "env", name: "system", kind: importFunc}},
			funcs:   []testFunc{{}},
			exports: []testExport{{"_start", 0, 1}},
		}.bytes(), `module imports function "system" from "env"`},
	} {
		err := e.Validate(context.Background(), tc.module)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestFetchCodeWithoutGrant(t *testing.T) {
	e := newExecutor(t, Config{})
	mod := hostCallModule(abi.FnHTTPFetch, []int32{0, int32(len(fetchSeed)), 100, 1000}, i64, int32(abi.CodeNoGrant), testData{0, fetchSeed})
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: mod}), runtime.ReasonNone)
}
