package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"switchyard/router/prompt"
	"switchyard/router/prompt/template"
	"switchyard/router/tokenizer"
)

// renderLimits are the router's bounds on one chat render: the request
// body, its messages and tools, the rendered text, the deadline.
var renderLimits = prompt.DefaultLimits()

// maxTemplateFileBytes is the size cap of a model card's artifacts, which
// a tokenizer_config.json or a chat template file is.
const maxTemplateFileBytes = template.MaxConfigBytes

func newPromptRenderCmd() *cobra.Command {
	var templatePath, requestPath, tokenizerPath string
	cmd := &cobra.Command{
		Use:   "render --template FILE --request FILE|- [--tokenizer FILE]",
		Short: "Print the text a chat template renders for an OpenAI chat completions body",
		Long: "Renders the messages (and tools, documents, chat_template_kwargs, add_generation_prompt)\n" +
			"of an OpenAI chat completions body, read from --request (- for stdin), with the chat\n" +
			"template of --template, as the router renders a live request: a FILE ending in .json is\n" +
			"a tokenizer_config.json (its chat_template and special tokens), anything else a plain\n" +
			"chat_template.jinja. Prints the rendered text exactly, with no newline added: the input\n" +
			"of `prompt tokenize`. With --tokenizer, prints the token ids instead, as `prompt tokenize`\n" +
			"prints them and the router hashes them (no special tokens added).\n" +
			"Bounded as the router is: a 4 MiB body, 4,096 messages, 512 tools, 1 MiB of rendered text,\n" +
			"1,048,576 ids, 2 s. The shim's global_prompts rewrites are not applied.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := renderPrompt(templatePath, requestPath, tokenizerPath, cmd.InOrStdin())
			if err != nil {
				return &exitError{1, err}
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			w.Write(out)
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&templatePath, "template", "", "the model's tokenizer_config.json, or a chat_template.jinja")
	cmd.Flags().StringVar(&requestPath, "request", "", "an OpenAI chat completions body (JSON), - for stdin")
	cmd.Flags().StringVar(&tokenizerPath, "tokenizer", "", "print the token ids under this tokenizer.json instead of the text")
	_ = cmd.MarkFlagRequired("template")
	_ = cmd.MarkFlagRequired("request")
	return cmd
}

// renderPrompt renders the request with the template and returns what the
// command prints: the text, or with a tokenizer its ids as a JSON array.
func renderPrompt(templatePath, requestPath, tokenizerPath string, stdin io.Reader) ([]byte, error) {
	renderer, err := loadTemplateFile(templatePath)
	if err != nil {
		return nil, err
	}
	var tok *tokenizer.Tokenizer
	if tokenizerPath != "" {
		if tok, err = loadTokenizerFile(tokenizerPath); err != nil {
			return nil, err
		}
	}
	body, err := readRequest(requestPath, stdin)
	if err != nil {
		return nil, err
	}
	text, err := renderBounded(renderer, body)
	if err != nil {
		return nil, fmt.Errorf("--request %s with --template %s: %w", requestPath, templatePath, err)
	}
	if tok == nil {
		return []byte(text), nil
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		return nil, encodeError(err)
	}
	return appendIDsJSON(make([]byte, 0, 8*len(ids)+3), ids), nil
}

// loadTemplateFile reads a tokenizer_config.json or a plain template,
// refusing a file over the artifact cap before reading it.
func loadTemplateFile(path string) (prompt.Renderer, error) {
	data, err := readCappedFile(path, maxTemplateFileBytes)
	if err != nil {
		return nil, fmt.Errorf("--template %w", err)
	}
	plain := !strings.EqualFold(filepath.Ext(path), ".json")
	r, err := prompt.TemplateFromFile(data, plain)
	if err != nil {
		return nil, fmt.Errorf("--template %s: %w", path, err)
	}
	return r, nil
}

// readCappedFile reads a regular file of at most limit bytes; errors
// start with the path.
func readCappedFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError names the path
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Mode().IsRegular() && info.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d an artifact may have", path, info.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than the %d bytes an artifact may have", path, limit)
	}
	return data, nil
}

// readRequest reads the chat body from a file or stdin (-), within the
// router's body cap, and checks its messages and tools against the
// router's caps before anything renders it.
func readRequest(path string, stdin io.Reader) ([]byte, error) {
	limit := int64(renderLimits.MaxBodyBytes)
	var body []byte
	if path == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, limit+1))
		if err != nil {
			return nil, fmt.Errorf("--request -: %w", err)
		}
		if int64(len(b)) > limit {
			return nil, fmt.Errorf("--request -: more than %d bytes, the most the router renders", limit)
		}
		body = b
	} else {
		b, err := readCappedFile(path, limit)
		if err != nil {
			return nil, fmt.Errorf("--request %w", err)
		}
		body = b
	}
	if err := checkChatShape(body); err != nil {
		return nil, fmt.Errorf("--request %s: %w", path, err)
	}
	return body, nil
}

// checkChatShape refuses a body that is not a chat completions request
// or that is over the router's message and tool caps.
func checkChatShape(body []byte) error {
	var shape struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &shape); err != nil {
		return fmt.Errorf("not an OpenAI chat completions body: %w", err)
	}
	if shape.Messages == nil {
		return errors.New("not an OpenAI chat completions body: no messages")
	}
	if n := len(shape.Messages); n > renderLimits.MaxMessages {
		return fmt.Errorf("%d messages, more than the %d the router renders", n, renderLimits.MaxMessages)
	}
	if n := len(shape.Tools); n > renderLimits.MaxTools {
		return fmt.Errorf("%d tools, more than the %d the router renders", n, renderLimits.MaxTools)
	}
	return nil
}

// renderBounded renders under the router's deadline and text cap. The
// render runs on its own goroutine: a template that loops without calling
// back into the template package cannot be interrupted, and the command
// gives up on it at the deadline as the router does (the process then
// exits, ending it).
func renderBounded(r prompt.Renderer, body []byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), renderLimits.Deadline)
	defer cancel()
	type rendered struct {
		text string
		err  error
	}
	done := make(chan rendered, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- rendered{err: fmt.Errorf("%w: panic: %v", template.ErrRender, p)}
			}
		}()
		in, err := template.InputFromChatRequest(body)
		if err != nil {
			done <- rendered{err: err}
			return
		}
		text, err := r.Render(ctx, in)
		done <- rendered{text, err}
	}()
	select {
	case res := <-done:
		if res.err == nil && len(res.text) > renderLimits.MaxRenderedBytes {
			res.err = fmt.Errorf("%w: rendered text is %d bytes, more than the %d the router tokenizes", prompt.ErrTooLarge, len(res.text), renderLimits.MaxRenderedBytes)
		}
		return res.text, res.err
	case <-ctx.Done():
		return "", fmt.Errorf("%w: the template ran past the router's %s deadline", template.ErrDeadline, renderLimits.Deadline)
	}
}
