// tls::session driven in memory: a client and a server session hand each other their output, with a
// certificate the test makes (a self-signed P-256 key and certificate for 127.0.0.1).

#include "tls/tls.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace fjord::tls {
namespace {

namespace fs = std::filesystem;

// A self-signed certificate for IP 127.0.0.1 in cert.pem and key.pem under a fresh directory.
class certificate_files {
public:
    certificate_files() {
        std::string pattern = (fs::temp_directory_path() / "fjord-tls-XXXXXX").string();
        dir = mkdtemp(pattern.data());
        EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
        X509* cert = X509_new();
        ASN1_INTEGER_set(X509_get_serialNumber(cert), 7);
        X509_gmtime_adj(X509_getm_notBefore(cert), -60);
        X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
        X509_set_pubkey(cert, key);
        X509_NAME* name = X509_get_subject_name(cert);
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
        X509_set_issuer_name(cert, name);
        X509V3_CTX v3;
        X509V3_set_ctx_nodb(&v3);
        X509V3_set_ctx(&v3, cert, cert, nullptr, nullptr, 0);
        X509_EXTENSION* san =
            X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, "IP:127.0.0.1");
        X509_add_ext(cert, san, -1);
        X509_EXTENSION_free(san);
        X509_sign(cert, key, EVP_sha256());
        cert_path = dir / "cert.pem";
        key_path = dir / "key.pem";
        FILE* f = std::fopen(cert_path.c_str(), "w");
        PEM_write_X509(f, cert);
        std::fclose(f);
        f = std::fopen(key_path.c_str(), "w");
        PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
        std::fclose(f);
        X509_free(cert);
        EVP_PKEY_free(key);
    }
    ~certificate_files() { fs::remove_all(dir); }
    fs::path dir, cert_path, key_path;
};

// Moves each side's output into the other's input until neither has any.
void pump(session& a, session& b) {
    for (bool moved = true; moved;) {
        moved = false;
        for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
            while (!from->output().empty()) {
                auto out = from->output();
                auto space = to->input_space();
                std::size_t n = std::min(out.size(), space.size());
                std::memcpy(space.data(), out.data(), n);
                to->input_added(n);
                from->output_sent(n);
                moved = true;
                if (n < out.size())
                    return;  // handshake flights fit; application bytes use transfer()
            }
        }
    }
}

struct pair_of_sessions {
    std::unique_ptr<session> client, server;
};

pair_of_sessions connected(const certificate_files& files, const std::string& name = "127.0.0.1") {
    auto server_ctx = context::server(files.cert_path, files.key_path);
    EXPECT_TRUE(server_ctx) << server_ctx.err().message;
    auto client_ctx = context::client(files.cert_path, true);
    EXPECT_TRUE(client_ctx) << client_ctx.err().message;
    auto s = session::accept(*server_ctx);
    auto c = session::connect(*client_ctx, name);
    return {std::move(*c), std::move(*s)};
}

bool handshake(pair_of_sessions& p, std::string* error = nullptr) {
    for (int round = 0; round < 10; ++round) {
        auto c = p.client->handshake();
        auto s = p.server->handshake();
        if (!c || !s) {
            if (error) *error = !c ? c.err().message : s.err().message;
            pump(*p.client, *p.server);
            return false;
        }
        pump(*p.client, *p.server);
        if (*c && *s) return true;
    }
    return false;
}

// Sends `data` from one side and reads it on the other, in pieces.
std::string transfer(session& from, session& to, const std::string& data) {
    std::string received;
    std::size_t offset = 0;
    std::vector<std::byte> sink(70'000);
    while (received.size() < data.size()) {
        if (offset < data.size()) {
            auto took = from.write(reinterpret_cast<const std::byte*>(data.data()) + offset,
                                   data.size() - offset);
            EXPECT_TRUE(took);
            offset += *took;
        }
        // Ciphertext moves in input-buffer-sized pieces; each is read before the next.
        while (!from.output().empty()) {
            auto out = from.output();
            auto space = to.input_space();
            std::size_t n = std::min(out.size(), space.size());
            std::memcpy(space.data(), out.data(), n);
            to.input_added(n);
            from.output_sent(n);
            for (;;) {
                auto got = to.read(sink.data(), sink.size());
                EXPECT_TRUE(got);
                if (*got == 0) break;
                received.append(reinterpret_cast<const char*>(sink.data()), *got);
            }
        }
    }
    return received;
}

TEST(TlsSession, HandshakeAndBytesBothWays) {
    certificate_files files;
    auto p = connected(files);
    ASSERT_TRUE(handshake(p));
    EXPECT_NE(p.server->description().find("TLSv1.3"), std::string::npos);
    std::mt19937 rng(3);
    for (std::size_t size : {std::size_t{1}, std::size_t{16384}, std::size_t{16385},
                             session::max_plaintext_per_write * 3 + 11}) {
        std::string data(size, '\0');
        for (auto& ch : data) ch = static_cast<char>(rng());
        EXPECT_EQ(transfer(*p.client, *p.server, data), data) << size;
        EXPECT_EQ(transfer(*p.server, *p.client, data), data) << size;
    }
}

// The network splits records anywhere: ciphertext arrives in pieces of 1 byte to a few records, and a
// receiver reads whenever something arrived. Every byte must come through in order, whatever the split.
TEST(TlsSession, RecordsSplitAtEveryBoundaryStillArriveWhole) {
    certificate_files files;
    auto p = connected(files);
    ASSERT_TRUE(handshake(p));
    std::mt19937 rng(11);
    std::string data(600'000, '\0');
    for (auto& ch : data) ch = static_cast<char>(rng());
    std::string received;
    std::size_t offset = 0;
    std::vector<std::byte> sink(5'000);
    std::vector<std::byte> wire;  // ciphertext sent but not yet received
    while (received.size() < data.size()) {
        if (offset < data.size()) {
            std::size_t piece = std::min<std::size_t>(data.size() - offset, 1 + rng() % 70'000);
            auto took =
                p.client->write(reinterpret_cast<const std::byte*>(data.data()) + offset, piece);
            ASSERT_TRUE(took);
            offset += *took;
            auto out = p.client->output();
            wire.insert(wire.end(), out.begin(), out.end());
            p.client->output_sent(out.size());
        }
        while (!wire.empty()) {
            std::size_t n =
                std::min<std::size_t>(wire.size(), 1 + rng() % (rng() % 4 == 0 ? 40'000 : 300));
            auto space = p.server->input_space();
            n = std::min(n, space.size());
            std::memcpy(space.data(), wire.data(), n);
            p.server->input_added(n);
            wire.erase(wire.begin(), wire.begin() + static_cast<std::ptrdiff_t>(n));
            for (;;) {
                auto got = p.server->read(sink.data(), 1 + rng() % sink.size());
                ASSERT_TRUE(got) << got.err().message;
                if (*got == 0) break;
                received.append(reinterpret_cast<const char*>(sink.data()), *got);
            }
            if (rng() % 8 == 0) p.server->shrink();  // between "requests", with nothing pending
        }
    }
    EXPECT_EQ(received, data);
}

TEST(TlsSession, WriteTakesAtMostItsBoundPerCall) {
    certificate_files files;
    auto p = connected(files);
    ASSERT_TRUE(handshake(p));
    std::string big(session::max_plaintext_per_write * 2, 'x');
    auto took = p.client->write(reinterpret_cast<const std::byte*>(big.data()), big.size());
    ASSERT_TRUE(took);
    EXPECT_EQ(*took, session::max_plaintext_per_write);
    EXPECT_LT(p.client->output().size(), session::max_plaintext_per_write + 4096);
}

TEST(TlsSession, CloseNotifyEndsTheStream) {
    certificate_files files;
    auto p = connected(files);
    ASSERT_TRUE(handshake(p));
    p.server->close_notify();
    pump(*p.server, *p.client);
    std::byte buf[64];
    auto got = p.client->read(buf, sizeof buf);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, 0u);
    EXPECT_TRUE(p.client->peer_closed());
}

TEST(TlsSession, AlteredRecordIsRefused) {
    certificate_files files;
    auto p = connected(files);
    ASSERT_TRUE(handshake(p));
    std::string data(1000, 'a');
    ASSERT_TRUE(p.client->write(reinterpret_cast<const std::byte*>(data.data()), data.size()));
    auto out = p.client->output();
    std::vector<std::byte> copy(out.begin(), out.end());
    copy[copy.size() / 2] ^= std::byte{1};
    p.client->output_sent(out.size());
    auto space = p.server->input_space();
    std::memcpy(space.data(), copy.data(), copy.size());
    p.server->input_added(copy.size());
    std::byte buf[2000];
    auto got = p.server->read(buf, sizeof buf);
    EXPECT_FALSE(got);
}

TEST(TlsSession, WrongNameIsRefusedByTheClient) {
    certificate_files files;
    auto p = connected(files, "127.0.0.2");
    std::string error;
    EXPECT_FALSE(handshake(p, &error));
    EXPECT_NE(error.find("mismatch"), std::string::npos) << error;
}

TEST(TlsSession, Tls12StillWorks) {
    certificate_files files;
    auto p = connected(files);
    // Cap the client at TLS 1.2 through a context of its own.
    auto client_ctx = context::client(files.cert_path, true);
    ASSERT_TRUE(client_ctx);
    SSL_CTX_set_max_proto_version((*client_ctx)->native(), TLS1_2_VERSION);
    p.client = std::move(*session::connect(*client_ctx, "127.0.0.1"));
    ASSERT_TRUE(handshake(p));
    EXPECT_NE(p.server->description().find("TLSv1.2"), std::string::npos);
    std::string data(100'000, 'z');
    EXPECT_EQ(transfer(*p.client, *p.server, data), data);
}

TEST(TlsSession, MismatchedKeyIsRefusedAtLoad) {
    certificate_files a, b;
    auto made = context::server(a.cert_path, b.key_path);
    ASSERT_FALSE(made);
    EXPECT_NE(made.err().message.find("does not match"), std::string::npos);
    auto missing = context::server(a.dir / "none.pem", a.key_path);
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.err().message.find("certificate chain"), std::string::npos);
}

}  // namespace
}  // namespace fjord::tls
