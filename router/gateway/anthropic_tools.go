package gateway

// tools converts client tools to function tools. Anthropic's server
// tools (web search, code execution, ...) run on Anthropic's side and
// have no chat counterpart.
func (cv *anthropicConversion) tools(top jsonObject) error {
	if top.absent("tools") {
		return nil
	}
	els, err := elements(top["tools"], "tools", maxListItems, "tools")
	if err != nil {
		return err
	}
	for i, el := range els {
		tp := at("tools", i)
		t, err := fields(el, tp, "type", "name", "description", "input_schema")
		if err != nil {
			return err
		}
		if typ, err := t.str("type", tp+".type"); err != nil || (typ != "" && typ != "custom") {
			return unsupported(tp, "a server tool (type "+quote(typ)+")")
		}
		fn := chatFunction{}
		if fn.Name, err = t.required("name", tp+".name"); err != nil {
			return err
		}
		if fn.Description, err = t.str("description", tp+".description"); err != nil {
			return err
		}
		if t.absent("input_schema") || !isJSONObject(t["input_schema"]) {
			return mustBe(tp+".input_schema", "a JSON schema object")
		}
		fn.Parameters = t["input_schema"]
		cv.req.Tools = append(cv.req.Tools, chatTool{Type: "function", Function: fn})
	}
	return nil
}

// toolChoice maps Anthropic's choice onto chat's: any is required, a
// named tool is a named function.
func (cv *anthropicConversion) toolChoice(top jsonObject) error {
	if top.absent("tool_choice") {
		return nil
	}
	tc, err := fields(top["tool_choice"], "tool_choice", "type", "name", "disable_parallel_tool_use")
	if err != nil {
		return err
	}
	switch typ, _ := tc.str("type", "tool_choice.type"); typ {
	case "auto":
		cv.req.ToolChoice = "auto"
	case "any":
		cv.req.ToolChoice = "required"
	case "none":
		cv.req.ToolChoice = "none"
	case "tool":
		name, err := tc.required("name", "tool_choice.name")
		if err != nil {
			return err
		}
		cv.req.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": name}}
	default:
		return mustBe("tool_choice.type", `"auto", "any", "tool" or "none"`)
	}
	off, err := tc.boolean("disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use")
	if err != nil {
		return err
	}
	if off {
		cv.req.ParallelToolCalls = new(false)
	}
	return nil
}
