package scaler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dtq/dtq/internal/queuestat"
)

// Reasons in the ErrorInfo detail of the gRPC errors the scaler returns.
const (
	ReasonBadMetadata      = "BAD_METADATA"
	ReasonUnknownMetric    = "UNKNOWN_METRIC"
	ReasonRedisUnavailable = "REDIS_UNAVAILABLE"
	ReasonRedisTimeout     = "REDIS_TIMEOUT"
	ReasonRedisError       = "REDIS_ERROR"
	ReasonShuttingDown     = "SHUTTING_DOWN"
	ReasonTooManyQueues    = "TOO_MANY_QUEUES"
	errorDomain            = "dtq.scaler"
)

// externalScaler implements KEDA's externalscaler.ExternalScaler.
type externalScaler struct {
	pb.UnimplementedExternalScalerServer
	s *Scaler
}

func (v *externalScaler) metadata(ref *pb.ScaledObjectRef) (Metadata, error) {
	if ref == nil {
		return Metadata{}, rpcError(&MetadataError{Key: "scaledObjectRef", Err: errors.New("is missing")})
	}
	m, err := ParseMetadata(ref.GetScalerMetadata())
	if err != nil {
		return m, rpcError(err)
	}
	return m, nil
}

// GetMetricSpec returns the trigger's metrics: the backlog of every watched band, then
// one per band group of bandTargets.
func (v *externalScaler) GetMetricSpec(_ context.Context, ref *pb.ScaledObjectRef) (*pb.GetMetricSpecResponse, error) {
	m, err := v.metadata(ref)
	if err != nil {
		return nil, err
	}
	return metricSpecs(m), nil
}

func metricSpecs(m Metadata) *pb.GetMetricSpecResponse {
	out := &pb.GetMetricSpecResponse{}
	for _, mt := range m.Metrics() {
		out.MetricSpecs = append(out.MetricSpecs, &pb.MetricSpec{
			MetricName:      mt.Name,
			TargetSize:      int64(math.Ceil(mt.Target)),
			TargetSizeFloat: mt.Target,
		})
	}
	return out
}

// GetMetrics returns the value of one metric, from a read at most the cache TTL old.
func (v *externalScaler) GetMetrics(ctx context.Context, req *pb.GetMetricsRequest) (*pb.GetMetricsResponse, error) {
	m, err := v.metadata(req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	var metric *Metric
	all := m.Metrics()
	for i := range all {
		if all[i].Name == req.GetMetricName() {
			metric = &all[i]
		}
	}
	if metric == nil {
		st := status.New(codes.InvalidArgument, fmt.Sprintf("metricName %q is not a metric of this trigger (GetMetricSpec lists them)", req.GetMetricName()))
		st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonUnknownMetric, Domain: errorDomain,
			Metadata: map[string]string{"metricName": req.GetMetricName()}})
		return nil, st.Err()
	}
	n, err := v.s.value(ctx, m, *metric)
	if err != nil {
		return nil, rpcError(err)
	}
	return &pb.GetMetricsResponse{MetricValues: []*pb.MetricValue{{
		MetricName:       req.GetMetricName(),
		MetricValue:      n,
		MetricValueFloat: float64(n),
	}}}, nil
}

// IsActive reports whether the watched backlog exceeds activationThreshold.
func (v *externalScaler) IsActive(ctx context.Context, ref *pb.ScaledObjectRef) (*pb.IsActiveResponse, error) {
	m, err := v.metadata(ref)
	if err != nil {
		return nil, err
	}
	n, err := v.s.value(ctx, m, m.Metrics()[0])
	if err != nil {
		return nil, rpcError(err)
	}
	return &pb.IsActiveResponse{Result: m.Active(n)}, nil
}

// StreamIsActive sends the trigger's activity at once and again on every change, until
// the client goes away or the scaler stops (then it returns nil, so KEDA reconnects
// after its short delay instead of backing off).
func (v *externalScaler) StreamIsActive(ref *pb.ScaledObjectRef, stream grpc.ServerStreamingServer[pb.IsActiveResponse]) error {
	m, err := v.metadata(ref)
	if err != nil {
		return err
	}
	sub, err := v.s.watch.subscribe(m)
	if err != nil {
		return rpcError(err)
	}
	defer v.s.watch.unsubscribe(sub)
	ctx := stream.Context()
	for {
		select {
		case active := <-sub.updates:
			if err := stream.Send(&pb.IsActiveResponse{Result: active}); err != nil {
				return err
			}
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-v.s.stopping:
			return nil
		}
	}
}

// StreamMetricSpec sends the metric specs when opened. They depend on the metadata
// alone, which KEDA does not change under an open stream, so nothing follows; the
// stream stays open until the client goes away or the scaler stops.
func (v *externalScaler) StreamMetricSpec(ref *pb.ScaledObjectRef, stream grpc.ServerStreamingServer[pb.GetMetricSpecResponse]) error {
	m, err := v.metadata(ref)
	if err != nil {
		return err
	}
	if err := stream.Send(metricSpecs(m)); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
		return status.FromContextError(stream.Context().Err()).Err()
	case <-v.s.stopping:
		return nil
	}
}

// rpcError maps an error to a gRPC status with an ErrorInfo reason (and, for bad
// metadata, a BadRequest naming the key).
func rpcError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	var me *MetadataError
	var wl *watchLimitError
	var code codes.Code
	var reason string
	switch {
	case errors.As(err, &wl):
		st := status.New(codes.ResourceExhausted, err.Error())
		st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonTooManyQueues, Domain: errorDomain,
			Metadata: map[string]string{"watched": strconv.Itoa(wl.watched), "adds": strconv.Itoa(wl.adds), "max": strconv.Itoa(wl.max)}})
		return st.Err()
	case errors.As(err, &me):
		st := status.New(codes.InvalidArgument, err.Error())
		st, _ = st.WithDetails(
			&errdetails.ErrorInfo{Reason: ReasonBadMetadata, Domain: errorDomain, Metadata: map[string]string{"key": me.Key}},
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: me.Key, Description: me.Err.Error()}}})
		return st.Err()
	case errors.Is(err, errClosed):
		code, reason = codes.Unavailable, ReasonShuttingDown
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		code, reason = codes.Unavailable, ReasonRedisTimeout
	case queuestat.IsServerError(err):
		code, reason = codes.FailedPrecondition, ReasonRedisError
	default:
		code, reason = codes.Unavailable, ReasonRedisUnavailable
	}
	st := status.New(code, "redis: "+err.Error())
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain})
	return st.Err()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// recoverUnary and recoverStream turn a panic in a handler into codes.Internal, so one
// bad request cannot take the scaler down.
func (s *Scaler) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("scaler: handler panicked", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	resp, err = h(ctx, req)
	s.observeRPC(info.FullMethod, err)
	return resp, err
}

func (s *Scaler) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("scaler: stream handler panicked", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	err = h(srv, ss)
	s.observeRPC(info.FullMethod, err)
	return err
}
