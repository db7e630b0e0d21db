package browser

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// The published JSON Schema and the parser agree: each action's fields are
// the same in both, and scripts one accepts the other accepts too.
func TestScriptSchemaMatchesTheParser(t *testing.T) {
	var doc struct {
		Defs struct {
			Step struct {
				OneOf []struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"oneOf"`
			} `json:"step"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(palyrav1.BrowserScriptSchema, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[Action]bool{}
	for _, s := range doc.Defs.Step.OneOf {
		var c struct {
			Const string `json:"const"`
		}
		json.Unmarshal(s.Properties["action"], &c)
		a := Action(c.Const)
		want, ok := actionFields[a]
		if !ok {
			t.Errorf("schema has action %q the parser does not know", a)
			continue
		}
		seen[a] = true
		var got []string
		for k := range s.Properties {
			if k != "action" && k != "timeout_ms" {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: schema fields %v, parser fields %v", a, got, w)
		}
	}
	for a := range actionFields {
		if !seen[a] {
			t.Errorf("the schema lacks action %q", a)
		}
	}

	schemaDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(palyrav1.BrowserScriptSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("urn:palyra:browser-script:v1", schemaDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("urn:palyra:browser-script:v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		script string
		ok     bool
	}{
		{`{"steps":[{"action":"navigate","url":"https://example.com/"}]}`, true},
		{`{"timeout_ms":5000,"steps":[{"action":"navigate","url":"http://127.0.0.1:8080/"},{"action":"type","selector":"#user","text":"ada"},
		  {"action":"press","key":"Enter"},{"action":"wait_for","text":"Welcome"},{"action":"extract","selector":"a","attribute":"href","name":"link"},
		  {"action":"evaluate","expression":"document.title","name":"title"},{"action":"screenshot","full_page":true},{"action":"pdf","name":"page.pdf"}]}`, true},
		{`{"steps":[]}`, false},
		{`{"steps":[{"action":"navigate"}]}`, false},
		{`{"steps":[{"action":"navigate","url":"ftp://x/"}]}`, false},
		{`{"steps":[{"action":"click","selector":"a","url":"x"}]}`, false},
		{`{"steps":[{"action":"fly"}]}`, false},
		{`{"steps":[{"action":"wait_for","selector":"a","text":"b"}]}`, false},
		{`{"steps":[{"action":"screenshot","selector":"a","full_page":true}]}`, false},
		{`{"steps":[{"action":"screenshot","name":"x.jpg"}]}`, false},
		{`{"steps":[{"action":"extract","selector":"a"}]}`, false},
		{`{"steps":[{"action":"navigate","url":"https://example.com/"}],"extra":1}`, false},
	} {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(tc.script)))
		if err != nil {
			t.Fatal(err)
		}
		schemaErr := sch.Validate(v)
		_, parseErr := ParseScript([]byte(tc.script))
		if (schemaErr == nil) != tc.ok || (parseErr == nil) != tc.ok {
			t.Errorf("%s: schema says %v, parser says %v; want ok=%v", tc.script, schemaErr, parseErr, tc.ok)
		}
	}
}
