// tensorbroker_tls_floor: the floor under a fetch between brokers (bench/remote_bench.py). Bytes
// over ONE TLS 1.3 connection on 127.0.0.1 with mutual authentication, the test certificates
// (tests/support/make_test_pki.sh) and TLS_AES_256_GCM_SHA384 (the suite two tensorbrokerd
// negotiate, gRPC on OpenSSL 3: seen in their ServerHello), nothing else: no HTTP/2, no
// protobuf, no broker. A forked server (broker-a's certificate) answers each request (8 bytes:
// a size) with that many stamped bytes from a buffer filled beforehand; the client (broker-b's)
// times from its request until the last byte is in a preallocated, pre-faulted buffer, then
// checks the bytes (untimed). The handshake is timed once, apart. Exit 1 on an error.
//   --plain  the same over bare TCP (no TLS), to tell what TLS adds.
//   --fresh  each answer into a new memfd segment (memfd_create, fallocate, mmap, within the
//            timing), whose pages fault in as the bytes come, as a replica's do in the daemon.
// Usage: tensorbroker_tls_floor --pki DIR [--sizes 4K,64M,1G] [--rounds N] [--plain] [--fresh]
//            [--ciphersuites TLS_AES_256_GCM_SHA384] [--json]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kWriteChunk = 16 << 20;  // one SSL_write (OpenSSL cuts it into 16 KiB records)

struct Options {
  std::string pki;
  std::vector<uint64_t> sizes = {4 << 10, 64 << 20, 1 << 30};
  int rounds = 3;
  std::string ciphersuites = "TLS_AES_256_GCM_SHA384";
  bool json = false;
  bool plain = false;  // no TLS at all: the bare TCP connection, for comparison
  bool fresh = false;  // each answer into a new memfd segment, as a replica's bytes are
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tls_floor: %s", what.c_str());
  unsigned long error;
  while ((error = ERR_get_error()) != 0) {
    std::fprintf(stderr, ": %s", ERR_error_string(error, nullptr));
  }
  std::fprintf(stderr, "\n");
  std::exit(1);
}

// 4096, 4K, 64M, 1G or 1GiB (powers of 1024), like the project's other sizes; a small parser of
// its own so that this program needs nothing of the project but OpenSSL.
uint64_t ParseSize(const std::string& text) {
  char* end = nullptr;
  const unsigned long long number = std::strtoull(text.c_str(), &end, 10);
  std::string unit(end);
  if (unit.size() == 3 && unit.substr(1) == "iB") unit.resize(1);
  const std::string units = "KMGT";
  const size_t power = unit.empty() ? 0 : units.find(unit) + 1;
  if (end == text.c_str() || number == 0 || (!unit.empty() && (unit.size() != 1 || power == 0))) {
    Die("not a size: '" + text + "'");
  }
  return static_cast<uint64_t>(number) << (10 * power);
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--json") {
      options.json = true;
    } else if (flag == "--plain") {
      options.plain = true;
    } else if (flag == "--fresh") {
      options.fresh = true;
    } else if (flag == "--pki" && has_value) {
      options.pki = argv[++i];
    } else if (flag == "--rounds" && has_value) {
      options.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--ciphersuites" && has_value) {
      options.ciphersuites = argv[++i];
    } else if (flag == "--sizes" && has_value) {
      options.sizes.clear();
      std::string list = argv[++i];
      for (size_t start = 0; start <= list.size();) {
        size_t end = std::min(list.find(',', start), list.size());
        options.sizes.push_back(ParseSize(list.substr(start, end - start)));
        start = end + 1;
      }
    } else {
      Die("usage: tensorbroker_tls_floor --pki DIR [--sizes 4K,64M,1G] [--rounds N] "
          "[--ciphersuites SUITES] [--plain] [--fresh] [--json]");
    }
  }
  if (options.pki.empty() && !options.plain)
    Die("--pki DIR is required (tests/support/make_test_pki.sh DIR)");
  return options;
}

// The stamp both sides agree on: byte i of every answer.
inline uint8_t Stamp(uint64_t i) { return static_cast<uint8_t>(7 + i * 11 + i / 5003); }

// A TLS 1.3 context with `broker`'s certificate that demands and verifies the other side's.
SSL_CTX* MakeContext(const Options& options, const std::string& broker, bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) Die("SSL_CTX_new");
  const std::string base = options.pki + "/" + broker;
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(ctx, options.ciphersuites.c_str()) != 1 ||
      SSL_CTX_use_certificate_chain_file(ctx, (base + ".crt").c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, (base + ".key").c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(ctx, (options.pki + "/ca.crt").c_str(), nullptr) != 1) {
    Die("setting up the TLS context of " + broker);
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return ctx;
}

// One connection: TLS, or with --plain the bare TCP socket (ssl == nullptr).
struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;
};

// Moves up to `size` bytes (at most kWriteChunk); what moved, or <= 0 on an error.
long Transfer(const Conn& conn, uint8_t* bytes, uint64_t size, bool write) {
  const size_t n = std::min<uint64_t>(size, kWriteChunk);
  if (conn.ssl != nullptr) {
    return write ? SSL_write(conn.ssl, bytes, static_cast<int>(n))
                 : SSL_read(conn.ssl, bytes, static_cast<int>(n));
  }
  return write ? ::send(conn.fd, bytes, n, MSG_NOSIGNAL) : ::recv(conn.fd, bytes, n, 0);
}

void ReadFully(const Conn& conn, uint8_t* into, uint64_t size) {
  for (uint64_t done = 0; done < size;) {
    const long n = Transfer(conn, into + done, size - done, /*write=*/false);
    if (n <= 0) Die("reading");
    done += static_cast<uint64_t>(n);
  }
}

void WriteFully(const Conn& conn, const uint8_t* from, uint64_t size) {
  for (uint64_t done = 0; done < size;) {
    const long n = Transfer(conn, const_cast<uint8_t*>(from) + done, size - done, /*write=*/true);
    if (n <= 0) Die("writing");
    done += static_cast<uint64_t>(n);
  }
}

// A TCP socket with TCP_NODELAY (as gRPC sets it); `connect_to` 0: a listener on 127.0.0.1 on a
// port the kernel picks (in `port`), else connected to 127.0.0.1:connect_to.
int Socket(int connect_to, int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(connect_to));
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  socklen_t length = sizeof address;
  const bool ok =
      fd >= 0 && (connect_to != 0 ? ::connect(fd, raw, length) == 0
                                  : ::bind(fd, raw, length) == 0 && ::listen(fd, 1) == 0 &&
                                        ::getsockname(fd, raw, &length) == 0);
  if (!ok) Die(std::string("a socket on 127.0.0.1: ") + std::strerror(errno));
  if (port != nullptr) *port = ntohs(address.sin_port);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// The forked server: fills its source, says so on `ready`, then serves one connection: each
// request (a size; 0: the end) is answered with that many stamped bytes.
[[noreturn]] void Serve(const Options& options, int listener, int ready) {
  const uint64_t largest = *std::max_element(options.sizes.begin(), options.sizes.end());
  std::vector<uint8_t> source(largest);
  for (uint64_t i = 0; i < largest; ++i) source[i] = Stamp(i);
  SSL_CTX* ctx = options.plain ? nullptr : MakeContext(options, "broker-a", /*server=*/true);
  if (::write(ready, "r", 1) != 1) Die("telling the client the server is ready");
  Conn conn;
  conn.fd = ::accept(listener, nullptr, nullptr);
  if (conn.fd < 0) Die("accept");
  const int one = 1;
  ::setsockopt(conn.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (ctx != nullptr) {
    conn.ssl = SSL_new(ctx);
    SSL_set_fd(conn.ssl, conn.fd);
    if (SSL_accept(conn.ssl) != 1) Die("SSL_accept");
  }
  while (true) {
    uint64_t size = 0;
    ReadFully(conn, reinterpret_cast<uint8_t*>(&size), sizeof size);
    if (size == 0 || size > largest) break;
    WriteFully(conn, source.data(), size);
  }
  if (conn.ssl != nullptr) SSL_shutdown(conn.ssl);
  ::close(conn.fd);
  std::_Exit(0);
}

// Connects to the server, as broker-b over TLS (checking that its certificate names 127.0.0.1).
Conn Connect(const Options& options, int port) {
  Conn conn;
  conn.fd = Socket(port, nullptr);
  if (options.plain) return conn;
  conn.ssl = SSL_new(MakeContext(options, "broker-b", /*server=*/false));
  SSL_set_fd(conn.ssl, conn.fd);
  if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(conn.ssl), "127.0.0.1") != 1) Die("set1_ip");
  if (SSL_connect(conn.ssl) != 1) Die("SSL_connect");
  return conn;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A new memfd of `size` bytes, reserved with fallocate and mapped shared, as the daemon makes a
// replica's segment: none of its pages is mapped in this process yet.
uint8_t* FreshSegment(uint64_t size) {
  const int fd = ::memfd_create("tls-floor", MFD_CLOEXEC);
  if (fd < 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0) Die("a memfd segment");
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (at == MAP_FAILED) Die("mapping a memfd segment");
  return static_cast<uint8_t*>(at);
}

// One answer of `size` bytes into `buffer` (with --fresh, into a fresh segment made within the
// timing): the seconds from the request to its last byte.
double TimeOne(const Options& options, const Conn& conn, uint8_t* buffer, uint64_t size) {
  const auto start = std::chrono::steady_clock::now();
  uint8_t* into = options.fresh ? FreshSegment(size) : buffer;
  WriteFully(conn, reinterpret_cast<const uint8_t*>(&size), sizeof size);
  ReadFully(conn, into, size);
  const double seconds = Seconds(start);
  for (uint64_t i = 0; i < size; ++i) {
    if (into[i] != Stamp(i)) Die("byte " + std::to_string(i) + " is wrong");
  }
  if (options.fresh) ::munmap(into, size);
  return seconds;
}

struct SizeResult {
  uint64_t size;
  std::vector<double> seconds;  // one per round, in order
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void Print(const Options& options, const Conn& conn, double handshake,
           const std::vector<SizeResult>& results) {
  const char* version = conn.ssl != nullptr ? SSL_get_version(conn.ssl) : "none (plain TCP)";
  const char* cipher = conn.ssl != nullptr ? SSL_get_cipher_name(conn.ssl) : "none";
  if (!options.json) {
    std::printf("floor: %s %s, connection %.2f ms, %d rounds\n", version, cipher, handshake * 1e3,
                options.rounds);
    for (const SizeResult& r : results) {
      const double median = Median(r.seconds);
      std::printf("%12llu bytes  median %10.3f ms  %7.3f GiB/s\n",
                  static_cast<unsigned long long>(r.size), median * 1e3,
                  r.size / median / (1024.0 * 1024 * 1024));
    }
    return;
  }
  std::printf("{\"version\":\"%s\",\"cipher\":\"%s\",\"connect_s\":%.6f,\"sizes\":[", version,
              cipher, handshake);
  for (size_t i = 0; i < results.size(); ++i) {
    std::printf("%s{\"bytes\":%llu,\"seconds\":[", i ? "," : "",
                static_cast<unsigned long long>(results[i].size));
    for (size_t j = 0; j < results[i].seconds.size(); ++j) {
      std::printf("%s%.9f", j ? "," : "", results[i].seconds[j]);
    }
    std::printf("]}");
  }
  std::printf("]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  int port = 0;
  const int listener = Socket(0, &port);
  int ready[2];
  if (::pipe(ready) != 0) Die("pipe");
  const pid_t server = ::fork();  // before any thread or TLS state
  if (server < 0) Die("fork");
  if (server == 0) Serve(options, listener, ready[1]);
  ::close(listener);
  const uint64_t largest = *std::max_element(options.sizes.begin(), options.sizes.end());
  // Zeroed: every page faulted in before the timing (with --fresh, unused).
  std::vector<uint8_t> buffer(options.fresh ? 0 : largest, 0);
  char byte;
  if (::read(ready[0], &byte, 1) != 1) Die("the server did not start");
  const auto start = std::chrono::steady_clock::now();
  const Conn conn = Connect(options, port);
  const double handshake = Seconds(start);
  std::vector<SizeResult> results;
  for (uint64_t size : options.sizes) {
    SizeResult result{size, {}};
    (void)TimeOne(options, conn, buffer.data(), std::min<uint64_t>(size, 1 << 20));  // warm-up
    for (int round = 0; round < options.rounds; ++round) {
      result.seconds.push_back(TimeOne(options, conn, buffer.data(), size));
    }
    results.push_back(std::move(result));
  }
  const uint64_t end = 0;
  WriteFully(conn, reinterpret_cast<const uint8_t*>(&end), sizeof end);
  int status = 0;
  if (::waitpid(server, &status, 0) != server || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("the server did not exit cleanly");
  }
  Print(options, conn, handshake, results);
  return 0;
}
