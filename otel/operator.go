package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimitkit/ratelimit"
)

// operatorActions counts the operator actions the limiters report
// (ratelimit.EventSetRate and the kinds after it) on the counter
// ratelimit.operator.actions {action}, with the attributes
// ratelimit.limiter and ratelimit.operator.action.
type operatorActions struct{ c metric.Int64Counter }

func newOperatorActions(meter metric.Meter) (operatorActions, error) {
	c, err := meter.Int64Counter("ratelimit.operator.actions", metric.WithUnit("{action}"),
		metric.WithDescription("Changes made at run time, by limiter and action (set_rate, set_override, remove_override, reset, settle)."))
	return operatorActions{c}, err
}

// observe counts e under name if it is an operator action.
func (o operatorActions) observe(name string, e ratelimit.Event) {
	if a := ratelimit.OperatorAction(e.Kind); a != "" && o.c != nil {
		o.c.Add(context.Background(), 1, metric.WithAttributes(
			LimiterKey.String(name), attribute.String("ratelimit.operator.action", a)))
	}
}
