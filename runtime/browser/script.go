package browser

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on a script. They keep a hostile script from costing the worker
// more than a bounded amount of parsing and browser work.
const (
	MaxScriptBytes     = 1 << 20  // whole Spec.Script
	MaxSteps           = 256      // steps per script
	MaxURLBytes        = 8 << 10  // navigate url
	MaxSelectorBytes   = 1 << 10  // CSS selector
	MaxTypeTextBytes   = 4 << 10  // text typed by one "type" step
	MaxWaitTextBytes   = 1 << 10  // text awaited by "wait_for"
	MaxExpressionBytes = 64 << 10 // JavaScript of one "evaluate" step
	MaxNameBytes       = 128      // value or artifact name
	MaxAttributeBytes  = 256      // attribute name of "extract"
	MaxScriptTimeout   = time.Hour
)

// Action names a step kind.
type Action string

// The actions a script may use.
const (
	ActionNavigate   Action = "navigate"
	ActionClick      Action = "click"
	ActionType       Action = "type"
	ActionPress      Action = "press"
	ActionWaitFor    Action = "wait_for"
	ActionExtract    Action = "extract"
	ActionEvaluate   Action = "evaluate"
	ActionScreenshot Action = "screenshot"
	ActionPDF        Action = "pdf"
)

// Script is a parsed, validated browser job program (Spec.Script).
type Script struct {
	Steps []Step `json:"steps"`
	// TimeoutMS, when set, is the default time limit of each step (in
	// place of Config.StepTimeout); a step's own timeout_ms overrides it.
	// It does not bound the whole run: Spec.Timeout (the job's --timeout)
	// does.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Step is one action. Which fields an action takes is listed in
// actionFields; any other field present is refused.
type Step struct {
	Action     Action `json:"action"`
	URL        string `json:"url,omitempty"`
	Selector   string `json:"selector,omitempty"`
	Text       string `json:"text,omitempty"`
	Key        string `json:"key,omitempty"`
	Attribute  string `json:"attribute,omitempty"`
	Name       string `json:"name,omitempty"`
	Expression string `json:"expression,omitempty"`
	FullPage   bool   `json:"full_page,omitempty"`
	// TimeoutMS overrides the script's timeout_ms and the executor's
	// per-step timeout for this step (still bounded by the job's deadline).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`

	// timeoutBy names the setting TimeoutMS came from when it is not the
	// step's own timeout_ms (a session's defaults), for the error of a
	// step that runs out of it.
	timeoutBy string
	// ref is the observe ref a session step named instead of a selector
	// (Selector is then refSelector(ref)); messages name the ref, not the
	// internal selector.
	ref string
}

// actionFields lists, per action, the fields it accepts besides "action"
// and "timeout_ms"; required ones are checked in validate.
var actionFields = map[Action][]string{
	ActionNavigate:   {"url"},
	ActionClick:      {"selector"},
	ActionType:       {"selector", "text"},
	ActionPress:      {"key"},
	ActionWaitFor:    {"selector", "text"},
	ActionExtract:    {"selector", "attribute", "name"},
	ActionEvaluate:   {"expression", "name"},
	ActionScreenshot: {"name", "selector", "full_page"},
	ActionPDF:        {"name"},
}

// actionNames is the sorted list of actions, for error messages.
var actionNames = func() string {
	var names []string
	for a := range actionFields {
		names = append(names, string(a))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}()

var (
	nameRE      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	attributeRE = regexp.MustCompile(`^[A-Za-z_:][A-Za-z0-9_:.-]*$`)
)

// ScriptError is why a script was refused. Step is the index of the
// offending step, or -1 when the problem is not in one step.
type ScriptError struct {
	Step int
	Msg  string
}

func (e *ScriptError) Error() string {
	if e.Step < 0 {
		return "invalid browser script: " + e.Msg
	}
	return fmt.Sprintf("invalid browser script: steps[%d]: %s", e.Step, e.Msg)
}

func scriptErr(step int, format string, args ...any) error {
	return &ScriptError{Step: step, Msg: fmt.Sprintf(format, args...)}
}

// ParseScript decodes and validates a script. It is strict: unknown fields,
// unknown actions, fields an action does not use, trailing data and
// oversized values are refused with an error naming the step and the fix.
// Every error is a *ScriptError.
func ParseScript(data []byte) (*Script, error) {
	if len(data) > MaxScriptBytes {
		return nil, scriptErr(-1, "script is %d bytes, the limit is %d; split the job", len(data), MaxScriptBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, scriptErr(-1, `script is empty; send a JSON object like {"steps":[{"action":"navigate","url":"https://example.com"}]}`)
	}
	var top struct {
		Steps     []json.RawMessage `json:"steps"`
		TimeoutMS *int64            `json:"timeout_ms"`
	}
	if err := decodeStrict(data, &top); err != nil {
		return nil, scriptErr(-1, "%s; the script is a JSON object with \"steps\" (a list) and optional \"timeout_ms\"", err)
	}
	if len(top.Steps) == 0 {
		return nil, scriptErr(-1, `"steps" is missing or empty; give at least one step such as {"action":"navigate","url":"https://example.com"}`)
	}
	if len(top.Steps) > MaxSteps {
		return nil, scriptErr(-1, "%d steps, the limit is %d; split the job", len(top.Steps), MaxSteps)
	}
	s := &Script{Steps: make([]Step, len(top.Steps))}
	if top.TimeoutMS != nil {
		if err := checkTimeout(*top.TimeoutMS); err != nil {
			return nil, scriptErr(-1, "timeout_ms: %s", err)
		}
		s.TimeoutMS = *top.TimeoutMS
	}
	var names usedNames
	for i, raw := range top.Steps {
		st, err := parseStep(i, raw)
		if err != nil {
			return nil, err
		}
		if err := names.add(i, st); err != nil {
			return nil, err
		}
		s.Steps[i] = st
	}
	return s, nil
}

// usedNames refuses a value or artifact name that an earlier step of the
// same script (or session call) already uses: the later one would
// silently replace the earlier one's output.
type usedNames struct {
	values, artifacts map[string]int
}

// add records step i's name, or says which step already uses it.
func (u *usedNames) add(i int, st Step) error {
	if u.values == nil {
		u.values, u.artifacts = map[string]int{}, map[string]int{}
	}
	switch st.Action {
	case ActionExtract, ActionEvaluate:
		if j, dup := u.values[st.Name]; dup {
			return scriptErr(i, "name %q is already used by steps[%d]; give each value a unique name", st.Name, j)
		}
		u.values[st.Name] = i
	case ActionScreenshot, ActionPDF:
		if j, dup := u.artifacts[st.Name]; dup {
			return scriptErr(i, "artifact name %q is already used by steps[%d]; give each artifact a unique name", st.Name, j)
		}
		u.artifacts[st.Name] = i
	}
	return nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("bad JSON: unexpected data after the object")
	}
	return nil
}

func parseStep(i int, raw json.RawMessage) (Step, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Step{}, scriptErr(i, `a step must be a JSON object like {"action":"click","selector":"#go"}`)
	}
	var action string
	if a, ok := fields["action"]; !ok || json.Unmarshal(a, &action) != nil || action == "" {
		return Step{}, scriptErr(i, `"action" is missing or not a string; use one of: %s`, actionNames)
	}
	allowed, ok := actionFields[Action(action)]
	if !ok {
		return Step{}, scriptErr(i, "unknown action %q; use one of: %s", truncate(action, 64), actionNames)
	}
	for k := range fields {
		if k != "action" && k != "timeout_ms" && !slices.Contains(allowed, k) {
			return Step{}, scriptErr(i, "%s does not take field %q; remove it (%s takes: %s, timeout_ms)",
				action, truncate(k, 64), action, strings.Join(allowed, ", "))
		}
	}
	var st Step
	if err := decodeStrict(raw, &st); err != nil {
		return Step{}, scriptErr(i, "%s: %s", action, err)
	}
	if _, ok := fields["timeout_ms"]; ok {
		if err := checkTimeout(st.TimeoutMS); err != nil {
			return Step{}, scriptErr(i, "%s: timeout_ms: %s", action, err)
		}
	}
	if err := st.validate(i); err != nil {
		return Step{}, err
	}
	return st, nil
}

func checkTimeout(ms int64) error {
	if ms <= 0 || ms > MaxScriptTimeout.Milliseconds() {
		return fmt.Errorf("%d is out of range; give milliseconds between 1 and %d", ms, MaxScriptTimeout.Milliseconds())
	}
	return nil
}

// validate checks the fields of a decoded step and fills defaults.
func (st *Step) validate(i int) error {
	a := st.Action
	switch a {
	case ActionNavigate:
		if st.URL == "" {
			return scriptErr(i, `navigate needs "url", e.g. "https://example.com/"`)
		}
		if err := checkNavigateURL(st.URL); err != nil {
			return scriptErr(i, "navigate: %s", err)
		}
	case ActionClick:
		return checkSelector(i, a, st.Selector, true)
	case ActionType:
		if err := checkSelector(i, a, st.Selector, true); err != nil {
			return err
		}
		if st.Text == "" {
			return scriptErr(i, `type needs "text" to type into the element`)
		}
		return checkText(i, a, "text", st.Text, MaxTypeTextBytes)
	case ActionPress:
		if st.Key == "" {
			return scriptErr(i, `press needs "key": a single character or one of %s`, keyNames)
		}
		if _, err := keyFor(st.Key); err != nil {
			return scriptErr(i, "press: %s", err)
		}
	case ActionWaitFor:
		if (st.Selector == "") == (st.Text == "") {
			return scriptErr(i, `wait_for needs exactly one of "selector" (wait until a matching element is visible) or "text" (wait until the page text contains it)`)
		}
		if st.Selector != "" {
			return checkSelector(i, a, st.Selector, true)
		}
		return checkText(i, a, "text", st.Text, MaxWaitTextBytes)
	case ActionExtract:
		if err := checkSelector(i, a, st.Selector, true); err != nil {
			return err
		}
		if st.Attribute != "" && (len(st.Attribute) > MaxAttributeBytes || !attributeRE.MatchString(st.Attribute)) {
			return scriptErr(i, "extract: attribute %q is not a valid attribute name (like href or data-id)", truncate(st.Attribute, 64))
		}
		return checkName(i, a, st.Name, true)
	case ActionEvaluate:
		if st.Expression == "" {
			return scriptErr(i, `evaluate needs "expression", a JavaScript expression such as "document.title"`)
		}
		if err := checkText(i, a, "expression", st.Expression, MaxExpressionBytes); err != nil {
			return err
		}
		return checkName(i, a, st.Name, true)
	case ActionScreenshot:
		if st.Selector != "" {
			if err := checkSelector(i, a, st.Selector, false); err != nil {
				return err
			}
			if st.FullPage {
				return scriptErr(i, `screenshot: "full_page" and "selector" exclude each other; keep one`)
			}
		}
		return st.artifactName(i, ".png")
	case ActionPDF:
		return st.artifactName(i, ".pdf")
	}
	return nil
}

// artifactName checks the name of an artifact step, defaulting it to
// step<i><ext>.
func (st *Step) artifactName(i int, ext string) error {
	if st.Name == "" {
		st.Name = fmt.Sprintf("step%d%s", i, ext)
		return nil
	}
	if err := checkName(i, st.Action, st.Name, false); err != nil {
		return err
	}
	if !strings.HasSuffix(st.Name, ext) {
		return scriptErr(i, "%s: name %q must end in %s", st.Action, st.Name, ext)
	}
	return nil
}

func checkSelector(i int, a Action, sel string, required bool) error {
	if sel == "" {
		if required {
			return scriptErr(i, `%s needs "selector", a CSS selector such as "#login"`, a)
		}
		return nil
	}
	return checkText(i, a, "selector", sel, MaxSelectorBytes)
}

func checkText(i int, a Action, field, s string, limit int) error {
	if len(s) > limit {
		return scriptErr(i, "%s: %s is %d bytes, the limit is %d", a, field, len(s), limit)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return scriptErr(i, "%s: %s must be valid UTF-8 without NUL characters", a, field)
	}
	return nil
}

func checkName(i int, a Action, name string, required bool) error {
	if name == "" {
		if required {
			return scriptErr(i, `%s needs "name", the key its value gets in the job's output`, a)
		}
		return nil
	}
	if len(name) > MaxNameBytes || !nameRE.MatchString(name) {
		return scriptErr(i, "%s: name %q must be 1-%d characters of letters, digits, '_', '.', '-' and not start with '.' or '-'", a, truncate(name, 64), MaxNameBytes)
	}
	return nil
}

// checkNavigateURL accepts absolute http(s) URLs with a host, and about:blank.
// Whether the host is allowed is decided at run time by the job's policy.
func checkNavigateURL(raw string) error {
	if len(raw) > MaxURLBytes {
		return fmt.Errorf("url is %d bytes, the limit is %d", len(raw), MaxURLBytes)
	}
	if raw == "about:blank" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url %q does not parse: %w", truncate(raw, 128), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q must start with http:// or https://", truncate(raw, 128))
	}
	if u.Hostname() == "" {
		return fmt.Errorf("url %q has no host", truncate(raw, 128))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
