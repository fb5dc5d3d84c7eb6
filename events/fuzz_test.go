package events_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spendgate/spendgate/events"
)

func FuzzParseMoney(f *testing.F) {
	for _, s := range []string{
		"0", "0.05", "1", "1.00", "000.5", "0.000000001", "999999999999999999.999999999999",
		"", "-1", "-0", "+1", "NaN", "nan", "Infinity", "inf", "1e3", "1E999999", " 1", "1 ",
		"1.", ".5", "0x10", "1,5", "１", "\xff", "1.2.3", strings.Repeat("9", 19),
		"0." + strings.Repeat("1", 13), strings.Repeat("0", 40), strings.Repeat("0", 41),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := events.ParseMoney(s)
		if err != nil {
			var e *events.Error
			if !errors.As(err, &e) || e.Code != events.CodeInvalidAmount {
				t.Fatalf("ParseMoney(%q) error %v is not %s", s, err, events.CodeInvalidAmount)
			}
			if !m.IsZero() {
				t.Fatalf("ParseMoney(%q) failed but returned %s", s, m)
			}
			return
		}
		if strings.ContainsAny(s, "eE-+") {
			t.Fatalf("ParseMoney accepted %q", s)
		}
		if len(s) > events.MaxAmountLen {
			t.Fatalf("ParseMoney accepted %d characters", len(s))
		}
		if m.Sign() < 0 {
			t.Fatalf("ParseMoney(%q) = %s is negative", s, m)
		}
		str := m.String()
		if strings.ContainsAny(str, "eE-+") {
			t.Fatalf("ParseMoney(%q).String() = %q is not plain", s, str)
		}
		back, err := events.ParseMoney(str)
		if err != nil {
			t.Fatalf("ParseMoney(%q).String() = %q does not re-parse: %v", s, str, err)
		}
		if back.Cmp(m) != 0 || back.String() != str {
			t.Fatalf("ParseMoney(%q) = %s re-parses to %s", s, str, back)
		}
		// Sums stay exact: m + m - m == m.
		if got := m.Add(m).Sub(m); got.Cmp(m) != 0 {
			t.Fatalf("%s + %s - %s = %s", str, str, str, got)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range goldenEvents() {
		b, err := events.EncodeEvent(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	goldens, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range goldens {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"type":""}`, `{"type":"nope.v1"}`, `{"type":1}`,
		`{"type":"reservation.opened.v1","extra":1}`,
		`{"type":"reservation.released.v1","reserved":"-0.05"}`,
		`{"type":"reservation.released.v1","reserved":"NaN"}`,
		`{"type":"reservation.settled.v1","at":"2026-11-30T00:00:00+05:30"}`,
		`{"type":"budget.defined.v1"}{"type":"budget.defined.v1"}`,
		"{\"type\":\"budget.defined.v1\",\"unit\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.DecodeEvent(b)
		if err != nil {
			if e != nil {
				t.Fatalf("DecodeEvent failed (%v) but returned %#v", err, e)
			}
			if events.CodeOf(err) != events.CodeInvalidRequest {
				t.Fatalf("DecodeEvent error %v has code %s", err, events.CodeOf(err))
			}
			return
		}
		// A decoded event encodes, and that encoding is a fixed point.
		enc, err := events.EncodeEvent(e)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", e, err)
		}
		e2, err := events.DecodeEvent(enc)
		if err != nil {
			t.Fatalf("re-encoded event %s does not decode: %v", enc, err)
		}
		enc2, err := events.EncodeEvent(e2)
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != string(enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
	})
}
