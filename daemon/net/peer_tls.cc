#include "daemon/net/peer_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tensorbroker::daemon {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct StoreFree {
  void operator()(X509_STORE* store) const { X509_STORE_free(store); }
};
struct StoreContextFree {
  void operator()(X509_STORE_CTX* context) const { X509_STORE_CTX_free(context); }
};
struct NamesFree {
  void operator()(GENERAL_NAMES* names) const { GENERAL_NAMES_free(names); }
};
using UniqueBio = std::unique_ptr<BIO, BioFree>;
using UniqueX509 = std::unique_ptr<X509, X509Free>;

// "--tls-cert /etc/tb/node.crt"
std::string Where(const char* flag, const std::string& path) {
  return absl::StrCat(flag, " ", path);
}

// The file's text; FAILED_PRECONDITION naming the flag and path when it cannot be read.
absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  if (path.empty()) return absl::FailedPreconditionError(absl::StrCat(flag, " is not set"));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(flag, path), ": cannot read it: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (1 << 20)) {
    return absl::FailedPreconditionError(absl::StrCat(Where(flag, path), ": larger than 1 MiB"));
  }
  return text.str();
}

UniqueBio MemoryBio(const std::string& text) {
  return UniqueBio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every certificate in a PEM text, in order.
std::vector<UniqueX509> Certificates(const std::string& pem) {
  std::vector<UniqueX509> certs;
  UniqueBio bio = MemoryBio(pem);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the end of the text reads as an error
  return certs;
}

// The certificate's common name, then its DNS names, without repeats.
std::vector<std::string> NamesOf(X509* cert) {
  std::vector<std::string> names;
  char common_name[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, common_name,
                                sizeof(common_name)) > 0) {
    names.emplace_back(common_name);
  }
  std::unique_ptr<GENERAL_NAMES, NamesFree> alternatives(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; alternatives != nullptr && i < sk_GENERAL_NAME_num(alternatives.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(alternatives.get(), i);
    if (name->type != GEN_DNS) continue;
    const ASN1_STRING* dns = name->d.dNSName;
    std::string text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                     static_cast<size_t>(ASN1_STRING_length(dns)));
    if (std::find(names.begin(), names.end(), text) == names.end()) names.push_back(text);
  }
  return names;
}

std::string NotAfter(X509* cert) {
  UniqueBio out(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(out.get(), X509_get0_notAfter(cert));
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(std::max(size, 0L)));
}

// Whether `cert` (with the rest of its chain) verifies against the CA certificates now; the
// reason when it does not.
absl::Status VerifyAgainst(X509* cert, const std::vector<UniqueX509>& chain,
                           const std::vector<UniqueX509>& authorities) {
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (const UniqueX509& authority : authorities) X509_STORE_add_cert(store.get(), authority.get());
  STACK_OF(X509)* intermediates = sk_X509_new_null();
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(intermediates, chain[i].get());
  std::unique_ptr<X509_STORE_CTX, StoreContextFree> context(X509_STORE_CTX_new());
  X509_STORE_CTX_init(context.get(), store.get(), cert, intermediates);
  const bool verified = X509_verify_cert(context.get()) == 1;
  const int error = X509_STORE_CTX_get_error(context.get());
  sk_X509_free(intermediates);  // the certificates stay the chain's
  if (verified) return absl::OkStatus();
  return absl::FailedPreconditionError(X509_verify_cert_error_string(error));
}

absl::Status CheckKeyMatches(const PeerTlsPaths& paths, X509* cert, const std::string& key_pem) {
  UniqueBio bio = MemoryBio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where("--tls-key", paths.key), ": no PEM private key in it"));
  }
  if (X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(absl::StrCat(
        Where("--tls-key", paths.key), " is not the key of ", Where("--tls-cert", paths.cert)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PeerTls> LoadPeerTls(const PeerTlsPaths& paths) {
  PeerTls tls;
  for (auto [flag, path, text] : {std::make_tuple("--tls-cert", &paths.cert, &tls.cert_chain),
                                  std::make_tuple("--tls-key", &paths.key, &tls.private_key),
                                  std::make_tuple("--tls-ca", &paths.ca, &tls.ca_certs)}) {
    auto read = ReadPem(flag, *path);
    if (!read.ok()) return read.status();
    *text = *std::move(read);
  }
  std::vector<UniqueX509> chain = Certificates(tls.cert_chain);
  if (chain.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where("--tls-cert", paths.cert), ": no PEM certificate in it"));
  }
  std::vector<UniqueX509> authorities = Certificates(tls.ca_certs);
  if (authorities.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where("--tls-ca", paths.ca), ": no PEM certificate in it"));
  }
  if (absl::Status s = CheckKeyMatches(paths, chain.front().get(), tls.private_key); !s.ok()) {
    return s;
  }
  if (absl::Status s = VerifyAgainst(chain.front().get(), chain, authorities); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where("--tls-cert", paths.cert), " does not verify against ",
                     Where("--tls-ca", paths.ca), ": ", s.message()));
  }
  tls.names = NamesOf(chain.front().get());
  if (tls.names.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where("--tls-cert", paths.cert), ": no common name and no DNS name to be known by"));
  }
  tls.not_after = NotAfter(chain.front().get());
  return tls;
}

std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerTls& tls) {
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca_certs;
  options.pem_key_cert_pairs.push_back({tls.private_key, tls.cert_chain});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const PeerTls& tls) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_certs;
  options.pem_private_key = tls.private_key;
  options.pem_cert_chain = tls.cert_chain;
  return grpc::SslCredentials(options);
}

std::vector<std::string> PeerNamesOf(const grpc::AuthContext& auth) {
  std::vector<std::string> names;
  if (!auth.IsPeerAuthenticated()) return names;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : auth.FindPropertyValues(property)) {
      std::string name(value.data(), value.size());
      if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(std::move(name));
      }
    }
  }
  return names;
}

}  // namespace tensorbroker::daemon
