package scaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/testcert"
)

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	certs := testcert.New(t)
	cfg := testConfig(redistest.Prefix(t))
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = certs.ServerCertFile, certs.ServerKeyFile, certs.CAFile
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(cfg, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(gl, nil)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(certs.CAPEM))
	pair, err := tls.X509KeyPair([]byte(certs.ClientCertPEM), []byte(certs.ClientKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	call := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		_, err = pb.NewExternalScalerClient(cc).GetMetricSpec(ctxT(t), ref("queues", "tls"))
		return err
	}
	if err := call(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
	if err := call(credentials.NewTLS(&tls.Config{RootCAs: pool})); err == nil {
		t.Error("without a client certificate: accepted")
	}
	if err := call(insecure.NewCredentials()); err == nil {
		t.Error("plaintext: accepted")
	}
}

func TestTLSFilesMustLoad(t *testing.T) {
	t.Parallel()
	certs := testcert.New(t)
	cfg := testConfig("x")
	cfg.TLSCertFile, cfg.TLSKeyFile = certs.ServerCertFile, certs.CAFile // a certificate is no key
	if _, err := New(cfg, nil, Options{}); err == nil {
		t.Fatal("New accepted a certificate file as the key")
	}
}
