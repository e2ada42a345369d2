package config

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds the process logger writing to stderr: level is debug,
// info, warn or error; format is console (for people) or json (for log
// shippers).
func NewLogger(level, format string) (*zap.Logger, error) {
	return newLogger(level, format, zapcore.Lock(os.Stderr))
}

func newLogger(level, format string, out zapcore.WriteSyncer) (*zap.Logger, error) {
	if err := checkOneOf("debug", "info", "warn", "error")(level); err != nil {
		return nil, &UsageError{Msg: fmt.Sprintf("invalid --log-level %q: %v", level, err)}
	}
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	enc := zapcore.EncoderConfig{
		TimeKey:        "ts",
		LevelKey:       "level",
		NameKey:        "logger",
		CallerKey:      "caller",
		MessageKey:     "msg",
		StacktraceKey:  "stacktrace",
		LineEnding:     zapcore.DefaultLineEnding,
		EncodeTime:     zapcore.ISO8601TimeEncoder,
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeCaller:   zapcore.ShortCallerEncoder,
	}
	var encoder zapcore.Encoder
	switch format {
	case "json":
		enc.EncodeLevel = zapcore.LowercaseLevelEncoder
		encoder = zapcore.NewJSONEncoder(enc)
	case "console":
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, &UsageError{Msg: fmt.Sprintf("invalid --log-format %q: want one of console, json", format)}
	}
	// No sampling: a control plane logs few lines, and a dropped failover
	// line costs more than the volume saves.
	core := zapcore.NewCore(encoder, out, zap.NewAtomicLevelAt(lvl))
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel)), nil
}
