package template

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ardanlabs/jinja"
)

// Private names the source rewrite (rewrite.go) points templates at. Jinja2 templates cannot reach
// them by accident: request kwargs with the prefix are refused.
const (
	privatePrefix = "__switchyard_"
	nameToJSON    = privatePrefix + "tojson"
	nameEnter     = privatePrefix + "enter"
	nameLeave     = privatePrefix + "leave"
	nameDepthVar  = privatePrefix + "depth"
)

// renderState is one render's budget and the first error a hook raised. Hook errors pass through
// the engine, which may wrap them; the state keeps the original so Render returns its kind.
type renderState struct {
	ctx        context.Context
	limits     Limits
	now        func() time.Time
	macroDepth int
	rangeItems int
	err        error
}

// fail records the first hook error and returns it for the engine to propagate.
func (st *renderState) fail(err error) (jinja.Value, error) {
	if st.err == nil {
		st.err = err
	}
	return jinja.Undefined(), err
}

// checkDeadline is called at every hook: it is the only place a render in progress sees its context.
func (st *renderState) checkDeadline() error {
	if err := st.ctx.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrDeadline, err)
	}
	return nil
}

func (st *renderState) addGlobals(vars map[string]jinja.Value) {
	vars["raise_exception"] = jinja.NewCallable("raise_exception", st.raiseException)
	vars["range"] = jinja.NewCallable("range", st.boundedRange)
	vars[nameToJSON] = jinja.NewCallable("tojson", st.toJSON)
	vars[nameEnter] = jinja.NewCallable("macro", st.enterMacro)
	vars[nameLeave] = jinja.NewCallable("macro", st.leaveMacro)
	if st.now == nil {
		// Shadows the engine's built-in, which reads the wall clock.
		vars["strftime_now"] = jinja.Undefined()
	} else {
		vars["strftime_now"] = jinja.NewCallable("strftime_now", st.strftimeNow)
	}
}

// run executes the engine, turning a panic into ErrRender and a hook's error into its own kind.
func (st *renderState) run(engine *jinja.Template, vars map[string]jinja.Value) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("%w: engine panic: %v", ErrRender, p)
		}
	}()
	out, err = engine.RenderValues(vars)
	if err == nil {
		return out, nil
	}
	if st.err != nil && errors.Is(err, st.err) {
		return "", st.err
	}
	if st.err != nil {
		return "", fmt.Errorf("%w (engine: %v)", st.err, err)
	}
	return "", fmt.Errorf("%w: %v", ErrRender, err)
}

func (st *renderState) raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return st.fail(fmt.Errorf("%w: raise_exception() without a message", ErrRaised))
	}
	msg := args[0].String()
	if args[0].IsString() {
		msg = args[0].AsString()
	}
	return st.fail(fmt.Errorf("%w: %s", ErrRaised, msg))
}

func (st *renderState) enterMacro(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := st.checkDeadline(); err != nil {
		return st.fail(err)
	}
	st.macroDepth++
	if st.macroDepth > st.limits.MaxMacroDepth {
		return st.fail(fmt.Errorf("%w: more than %d macro calls in progress (runaway recursion)", ErrLimit, st.limits.MaxMacroDepth))
	}
	return jinja.NewString(""), nil
}

func (st *renderState) leaveMacro(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	st.macroDepth--
	return jinja.NewString(""), nil
}

// boundedRange is Python's range with a per-render budget of items, since the engine's own builds
// any list it is asked for.
func (st *renderState) boundedRange(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := st.checkDeadline(); err != nil {
		return st.fail(err)
	}
	start, stop, step, err := rangeBounds(args)
	if err != nil {
		return st.fail(err)
	}
	n := rangeLen(start, stop, step)
	if n > int64(st.limits.MaxRangeItems-st.rangeItems) {
		return st.fail(fmt.Errorf("%w: range() would bring this render's range items over %d", ErrLimit, st.limits.MaxRangeItems))
	}
	st.rangeItems += int(n)
	items := make([]jinja.Value, n)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

func rangeBounds(args []jinja.Value) (start, stop, step int64, err error) {
	ints := make([]int64, len(args))
	for i, a := range args {
		if !a.IsInt() {
			return 0, 0, 0, fmt.Errorf("%w: range() takes integers, got %s", ErrRender, a.String())
		}
		ints[i] = a.AsInt()
	}
	switch len(ints) {
	case 1:
		return 0, ints[0], 1, nil
	case 2:
		return ints[0], ints[1], 1, nil
	case 3:
		if ints[2] == 0 {
			return 0, 0, 0, fmt.Errorf("%w: range() step must not be zero", ErrRender)
		}
		return ints[0], ints[1], ints[2], nil
	}
	return 0, 0, 0, fmt.Errorf("%w: range() takes 1 to 3 arguments, got %d", ErrRender, len(args))
}

// rangeLen counts range's items without overflowing on extreme bounds.
func rangeLen(start, stop, step int64) int64 {
	var span, stride uint64
	switch {
	case step > 0 && start < stop:
		span, stride = uint64(stop)-uint64(start), uint64(step)
	case step < 0 && start > stop:
		span, stride = uint64(start)-uint64(stop), uint64(-(step+1))+1
	default:
		return 0
	}
	n := (span-1)/stride + 1
	if n > 1<<62 {
		return 1 << 62
	}
	return int64(n)
}

func (st *renderState) strftimeNow(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := st.checkDeadline(); err != nil {
		return st.fail(err)
	}
	if len(args) != 1 || !args[0].IsString() {
		return st.fail(fmt.Errorf("%w: strftime_now() takes one format string", ErrRender))
	}
	s, err := strftime(st.now(), args[0].AsString())
	if err != nil {
		return st.fail(err)
	}
	return jinja.NewString(s), nil
}
