package skill

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTellsFailuresApart(t *testing.T) {
	const schema = `{"type":"object","required":["text"],"properties":{"text":{"type":"string"}},"additionalProperties":false}`
	if err := Validate(schema, []byte(`{"text":"hi"}`)); err != nil {
		t.Fatalf("a matching document: %v", err)
	}
	var de *DocError
	if err := Validate(schema, []byte(`{"bytes":0}`)); !errors.As(err, &de) || de.NotJSON || de.Detail == "" {
		t.Fatalf("a mismatch: %v", err)
	}
	if err := Validate(schema, []byte(`not json`)); !errors.As(err, &de) || !de.NotJSON {
		t.Fatalf("not JSON: %v", err)
	}
	if err := Validate(`{"type":`, []byte(`{}`)); err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("a broken schema: %v", err)
	}
	// Cached: the same schema again still checks.
	if err := Validate(schema, []byte(`{"text":1}`)); !errors.As(err, &de) || de.NotJSON {
		t.Fatalf("the cached schema: %v", err)
	}
}
