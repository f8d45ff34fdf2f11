package scenario

import (
	"encoding/xml"
	"fmt"
	"io"
)

// JUnit XML, as CI systems read it: one testsuite per scenario and mode,
// one testcase per expectation.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	File     string      `xml:"file,attr,omitempty"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	ClassName string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

func seconds(d interface{ Seconds() float64 }) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the suite's results as JUnit XML.
func WriteJUnit(w io.Writer, results []*Result) error {
	top := junitSuites{Name: "switchyard scenarios"}
	total := 0.0
	for _, r := range results {
		if r.Error != "" {
			s := junitSuite{Name: r.Name, File: r.Path, Tests: 1, Errors: 1, Time: "0.000",
				Cases: []junitCase{{ClassName: "scenarios." + slug(r.Name), Name: "load", Time: "0.000",
					Error: &junitMessage{Message: r.Error, Type: "invalid_scenario"}}}}
			top.add(s)
			continue
		}
		for _, m := range []*ModeResult{r.Sim, r.Live} {
			if m == nil {
				continue
			}
			total += m.Wall.Seconds()
			top.add(suiteOf(r, m))
		}
	}
	top.Time = fmt.Sprintf("%.3f", total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(top); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func (t *junitSuites) add(s junitSuite) {
	t.Tests += s.Tests
	t.Failures += s.Failures
	t.Errors += s.Errors
	t.Skipped += s.Skipped
	t.Suites = append(t.Suites, s)
}

func suiteOf(r *Result, m *ModeResult) junitSuite {
	class := "scenarios." + m.Mode + "." + slug(r.Name)
	s := junitSuite{Name: r.Name + " (" + m.Mode + ")", File: r.Path, Time: seconds(m.Wall)}
	switch {
	case m.Skipped != "":
		s.Tests, s.Skipped = 1, 1
		s.Cases = []junitCase{{ClassName: class, Name: "run", Time: "0.000", Skipped: &junitMessage{Message: m.Skipped}}}
		return s
	case m.Error != "":
		s.Tests, s.Errors = 1, 1
		s.Cases = []junitCase{{ClassName: class, Name: "run", Time: s.Time, Error: &junitMessage{Message: m.Error, Type: "run_failed"}}}
		return s
	}
	for _, v := range m.Verdicts {
		c := junitCase{ClassName: class, Name: v.Title, Time: "0.000"}
		switch {
		case v.Skipped != "":
			c.Skipped = &junitMessage{Message: v.Message()}
			s.Skipped++
		case !v.OK:
			c.Failure = &junitMessage{Message: v.Message(), Type: "expectation", Text: v.Detail}
			s.Failures++
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	if len(m.Verdicts) == 0 {
		// A scenario without expectations still reports that it ran.
		s.Tests++
		s.Cases = append(s.Cases, junitCase{ClassName: class, Name: "run", Time: s.Time})
	}
	return s
}
