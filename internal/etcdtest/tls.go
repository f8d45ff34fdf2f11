package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"switchyard/router/discoverysource/etcdsource/embedded"
)

// ServerName is the DNS name in the generated server certificate, so a
// test can prove that a client's ServerName setting is honoured.
const ServerName = "etcd.switchyard.test"

// TLSOptions selects what StartTLS requires of clients.
type TLSOptions struct {
	// ClientCertAuth makes the server refuse clients without a certificate
	// signed by the generated CA.
	ClientCertAuth bool
}

// TLSFiles are the PEM files StartTLS wrote into the test's temp dir.
type TLSFiles struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string
	ServerName                    string
}

// StartTLS runs a member that serves clients over TLS with a throw-away CA.
// The server certificate names 127.0.0.1 and ServerName; the client
// certificate (CN "switchyard-test") is signed by the same CA.
func StartTLS(t testing.TB, o TLSOptions) (*Server, TLSFiles) {
	t.Helper()
	files, err := writeTLSFiles(t.TempDir())
	if err != nil {
		t.Fatalf("etcdtest: certificates: %v", err)
	}
	s := start(t, embedded.Options{TLS: &embedded.TLS{
		CertFile:       files.ServerCertFile,
		KeyFile:        files.ServerKeyFile,
		CAFile:         files.CAFile,
		ClientCertAuth: o.ClientCertAuth,
	}}, &files)
	return s, files
}

// clientConfig is the TLS config of the test's own writing client.
func (f *TLSFiles) clientConfig() (*tls.Config, error) {
	pemCA, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, errors.New("no CA certificate in " + f.CAFile)
	}
	pair, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: f.ServerName, MinVersion: tls.VersionTLS12}, nil
}

// writeTLSFiles generates a CA, a server and a client certificate in dir.
func writeTLSFiles(dir string) (TLSFiles, error) {
	f := TLSFiles{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		ServerName:     ServerName,
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "switchyard test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, err
	}
	if err := writePEM(f.CAFile, "CERTIFICATE", caDER); err != nil {
		return f, err
	}
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: ServerName},
		DNSNames:     []string{ServerName, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := issue(server, ca, caKey, now, f.ServerCertFile, f.ServerKeyFile); err != nil {
		return f, err
	}
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "switchyard-test"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return f, issue(client, ca, caKey, now, f.ClientCertFile, f.ClientKeyFile)
}

// issue signs tmpl with the CA and writes the certificate and a new key.
func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyFile, "PRIVATE KEY", keyDER)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
