package metrics

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file is a strict parser of the text exposition format 0.0.4, used to
// check that everything the package writes is well formed. It is stricter
// than Prometheus: it also requires our ordering guarantees.

type parsedSample struct {
	name   string
	labels [][2]string // in written order
	value  string
}

type parsedFamily struct {
	name, help, typ string
	samples         []parsedSample
}

// value returns the sample of family f named name with exactly the given
// labels (name=value pairs), or "" if none.
func (f *parsedFamily) value(name string, labels ...string) string {
	for _, s := range f.samples {
		if s.name != name || len(s.labels) != len(labels)/2 {
			continue
		}
		match := true
		for i, l := range s.labels {
			if l[0] != labels[2*i] || l[1] != labels[2*i+1] {
				match = false
			}
		}
		if match {
			return s.value
		}
	}
	return ""
}

func parseExposition(text string) (map[string]*parsedFamily, error) {
	if text != "" && !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("output does not end in a newline")
	}
	fams := map[string]*parsedFamily{}
	var cur *parsedFamily
	var lastName string
	seen := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if text == "" {
			break
		}
		n := i + 1
		switch {
		case strings.HasPrefix(line, "# HELP "):
			rest := strings.TrimPrefix(line, "# HELP ")
			name, help, ok := strings.Cut(rest, " ")
			if !ok || !validName(name, true) {
				return nil, fmt.Errorf("line %d: bad HELP line %q", n, line)
			}
			if _, dup := fams[name]; dup {
				return nil, fmt.Errorf("line %d: family %s appears twice", n, name)
			}
			if name <= lastName {
				return nil, fmt.Errorf("line %d: family %s not in name order after %s", n, name, lastName)
			}
			h, err := unescape(help, false)
			if err != nil {
				return nil, fmt.Errorf("line %d: help: %v", n, err)
			}
			lastName = name
			cur = &parsedFamily{name: name, help: h}
			fams[name] = cur
		case strings.HasPrefix(line, "# TYPE "):
			rest := strings.TrimPrefix(line, "# TYPE ")
			name, typ, ok := strings.Cut(rest, " ")
			if !ok || cur == nil || name != cur.name || cur.typ != "" || len(cur.samples) > 0 {
				return nil, fmt.Errorf("line %d: TYPE %q does not follow its HELP line", n, line)
			}
			switch typ {
			case "counter", "gauge", "histogram":
			default:
				return nil, fmt.Errorf("line %d: unknown type %q", n, typ)
			}
			cur.typ = typ
		case strings.HasPrefix(line, "#") || line == "":
			return nil, fmt.Errorf("line %d: unexpected line %q", n, line)
		default:
			if cur == nil || cur.typ == "" {
				return nil, fmt.Errorf("line %d: sample before HELP and TYPE", n)
			}
			s, err := parseSample(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			ok := s.name == cur.name
			if cur.typ == "histogram" {
				ok = s.name == cur.name+"_bucket" || s.name == cur.name+"_sum" || s.name == cur.name+"_count"
			}
			if !ok {
				return nil, fmt.Errorf("line %d: sample %s in family %s (%s)", n, s.name, cur.name, cur.typ)
			}
			key := fmt.Sprint(s.name, s.labels)
			if seen[key] {
				return nil, fmt.Errorf("line %d: duplicate series %s", n, key)
			}
			seen[key] = true
			cur.samples = append(cur.samples, s)
		}
	}
	for _, f := range fams {
		if f.typ == "" {
			return nil, fmt.Errorf("family %s has no TYPE", f.name)
		}
		if f.typ == "histogram" {
			if err := checkHistogram(f); err != nil {
				return nil, err
			}
		}
	}
	return fams, nil
}

func parseSample(line string) (parsedSample, error) {
	var s parsedSample
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' {
		i++
	}
	s.name = line[:i]
	if !validName(s.name, true) {
		return s, fmt.Errorf("bad metric name %q", s.name)
	}
	if i < len(line) && line[i] == '{' {
		i++
		for {
			j := i
			for j < len(line) && line[j] != '=' {
				j++
			}
			if j+1 >= len(line) || line[j+1] != '"' {
				return s, fmt.Errorf("bad label in %q", line)
			}
			lname := line[i:j]
			if !validName(lname, false) {
				return s, fmt.Errorf("bad label name %q", lname)
			}
			for _, l := range s.labels {
				if l[0] == lname {
					return s, fmt.Errorf("label %s twice", lname)
				}
			}
			k := j + 2
			var raw strings.Builder
			for {
				if k >= len(line) {
					return s, fmt.Errorf("unterminated label value in %q", line)
				}
				if line[k] == '\\' && k+1 < len(line) {
					raw.WriteByte(line[k])
					raw.WriteByte(line[k+1])
					k += 2
					continue
				}
				if line[k] == '"' {
					break
				}
				raw.WriteByte(line[k])
				k++
			}
			v, err := unescape(raw.String(), true)
			if err != nil {
				return s, err
			}
			s.labels = append(s.labels, [2]string{lname, v})
			k++
			if k < len(line) && line[k] == ',' {
				i = k + 1
				continue
			}
			if k < len(line) && line[k] == '}' {
				i = k + 1
				break
			}
			return s, fmt.Errorf("bad label list in %q", line)
		}
	}
	if i >= len(line) || line[i] != ' ' {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.value = line[i+1:]
	if strings.ContainsAny(s.value, " \t") {
		return s, fmt.Errorf("value %q: we never write timestamps", s.value)
	}
	switch s.value {
	case "NaN", "+Inf", "-Inf":
	default:
		if _, err := strconv.ParseFloat(s.value, 64); err != nil {
			return s, fmt.Errorf("value %q: %v", s.value, err)
		}
	}
	return s, nil
}

func unescape(s string, quote bool) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' && quote {
			return "", fmt.Errorf("unescaped quote in %q", s)
		}
		if c == '\n' {
			return "", fmt.Errorf("raw newline in %q", s)
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("trailing backslash in %q", s)
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case '"':
			if !quote {
				return "", fmt.Errorf(`\" in help %q`, s)
			}
			b.WriteByte('"')
		default:
			return "", fmt.Errorf("bad escape \\%c in %q", s[i], s)
		}
	}
	return b.String(), nil
}

// checkHistogram checks, per label set: le ascending and ending in +Inf,
// cumulative counts non-decreasing, +Inf == _count, and a _sum.
func checkHistogram(f *parsedFamily) error {
	type state struct {
		lastLe  float64
		lastCnt float64
		inf     string
		count   string
		sum     bool
	}
	sets := map[string]*state{}
	get := func(s parsedSample) (*state, string) {
		var key []string
		le := ""
		for _, l := range s.labels {
			if l[0] == "le" {
				le = l[1]
				continue
			}
			key = append(key, l[0]+"="+l[1])
		}
		k := strings.Join(key, ",")
		if sets[k] == nil {
			sets[k] = &state{lastLe: math.Inf(-1)}
		}
		return sets[k], le
	}
	for _, s := range f.samples {
		st, le := get(s)
		v, _ := strconv.ParseFloat(s.value, 64)
		switch s.name {
		case f.name + "_bucket":
			if le == "" || st.inf != "" {
				return fmt.Errorf("%s: bucket without le or after +Inf", f.name)
			}
			if s.labels[len(s.labels)-1][0] != "le" {
				return fmt.Errorf("%s: le is not the last label", f.name)
			}
			u, err := strconv.ParseFloat(le, 64)
			if err != nil || u <= st.lastLe || v < st.lastCnt {
				return fmt.Errorf("%s: bucket le=%s count %s out of order", f.name, le, s.value)
			}
			st.lastLe, st.lastCnt = u, v
			if le == "+Inf" {
				st.inf = s.value
			}
		case f.name + "_sum":
			st.sum = true
		case f.name + "_count":
			st.count = s.value
		}
	}
	for k, st := range sets {
		if st.inf == "" || st.count != st.inf || !st.sum {
			return fmt.Errorf("%s{%s}: +Inf %q, count %q, sum %v", f.name, k, st.inf, st.count, st.sum)
		}
	}
	return nil
}
