// Package testpki makes throw-away certificates for tests: a CA, leaves it
// signs, their PEM files in the test's temp dir and the TLS settings a
// client trusting the CA uses.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a self-signed certificate authority, valid from an hour ago for a
// day.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// DER is the CA's certificate as signed.
	DER []byte
	// Pool trusts the CA alone.
	Pool *x509.CertPool
}

// New makes a CA with the given common name.
func New(tb testing.TB, commonName string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testpki: CA key: %v", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("testpki: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("testpki: CA certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, DER: der, Pool: pool}
}

// PEM is the CA's certificate in PEM.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.DER})
}

// Leaf describes a certificate the CA signs.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// Usage is the one extended key usage (default: server auth).
	Usage x509.ExtKeyUsage
}

// Issue signs a new key's certificate as l describes, with a random serial
// and the CA's validity.
func (ca *CA) Issue(tb testing.TB, l Leaf) tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testpki: key: %v", err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		tb.Fatalf("testpki: serial: %v", err)
	}
	usage := l.Usage
	if usage == 0 {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: l.CommonName},
		NotBefore: ca.Cert.NotBefore, NotAfter: ca.Cert.NotAfter,
		DNSNames: l.DNSNames, IPAddresses: l.IPs,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		tb.Fatalf("testpki: certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Server is a server certificate for 127.0.0.1 and localhost.
func (ca *CA) Server(tb testing.TB) tls.Certificate {
	tb.Helper()
	return ca.Issue(tb, Leaf{CommonName: "localhost", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
}

// Client is a client certificate whose DNS SANs are names.
func (ca *CA) Client(tb testing.TB, names ...string) tls.Certificate {
	tb.Helper()
	return ca.Issue(tb, Leaf{CommonName: "switchyard-test", DNSNames: names, Usage: x509.ExtKeyUsageClientAuth})
}

// ClientConfig trusts the CA alone and verifies serverName ("" for the
// dialed host); TLS 1.3.
func (ca *CA) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool, ServerName: serverName, MinVersion: tls.VersionTLS13}
}

// WriteCA writes the CA's certificate to ca.crt in a new temp dir.
func (ca *CA) WriteCA(tb testing.TB) string {
	tb.Helper()
	file := filepath.Join(tb.TempDir(), "ca.crt")
	write(tb, file, ca.PEM())
	return file
}

// WriteKeyPair writes cert's certificate (tls.crt) and key (tls.key, PKCS
// #8) in PEM to a new temp dir.
func WriteKeyPair(tb testing.TB, cert tls.Certificate) (certFile, keyFile string) {
	tb.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		tb.Fatalf("testpki: key: %v", err)
	}
	dir := tb.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write(tb, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}))
	write(tb, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

// ServerFiles is a new CA's server certificate for 127.0.0.1 and
// localhost written as WriteKeyPair does, and the CA.
func ServerFiles(tb testing.TB, commonName string) (ca *CA, certFile, keyFile string) {
	tb.Helper()
	ca = New(tb, commonName)
	certFile, keyFile = WriteKeyPair(tb, ca.Server(tb))
	return ca, certFile, keyFile
}

func write(tb testing.TB, file string, b []byte) {
	tb.Helper()
	if err := os.WriteFile(file, b, 0o600); err != nil {
		tb.Fatalf("testpki: %v", err)
	}
}
