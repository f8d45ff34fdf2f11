package template

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// strftime formats t as Python's datetime.strftime does in the C locale, for the directives chat
// templates use. Others are refused rather than guessed: C libraries disagree on them.
func strftime(t time.Time, format string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		if i+1 == len(format) {
			return "", fmt.Errorf("%w: strftime format ends in a lone %%", ErrRender)
		}
		i++
		if err := strftimeDirective(&sb, t, format[i]); err != nil {
			return "", err
		}
	}
	return sb.String(), nil
}

func strftimeDirective(sb *strings.Builder, t time.Time, d byte) error {
	pad2 := func(n int) { fmt.Fprintf(sb, "%02d", n) }
	switch d {
	case 'Y':
		fmt.Fprintf(sb, "%04d", t.Year())
	case 'y':
		pad2(t.Year() % 100)
	case 'm':
		pad2(int(t.Month()))
	case 'd':
		pad2(t.Day())
	case 'e':
		fmt.Fprintf(sb, "%2d", t.Day())
	case 'H':
		pad2(t.Hour())
	case 'I':
		pad2((t.Hour()+11)%12 + 1)
	case 'M':
		pad2(t.Minute())
	case 'S':
		pad2(t.Second())
	case 'f':
		fmt.Fprintf(sb, "%06d", t.Nanosecond()/1000)
	case 'j':
		fmt.Fprintf(sb, "%03d", t.YearDay())
	case 'p':
		sb.WriteString(map[bool]string{true: "PM", false: "AM"}[t.Hour() >= 12])
	case 'b':
		sb.WriteString(t.Month().String()[:3])
	case 'B':
		sb.WriteString(t.Month().String())
	case 'a':
		sb.WriteString(t.Weekday().String()[:3])
	case 'A':
		sb.WriteString(t.Weekday().String())
	case 'w':
		sb.WriteString(strconv.Itoa(int(t.Weekday())))
	case '%':
		sb.WriteByte('%')
	default:
		return fmt.Errorf("%w: strftime directive %%%c is not supported", ErrRender, d)
	}
	return nil
}
