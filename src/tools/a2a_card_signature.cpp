// Signed Agent Cards (parley/a2a.hpp; A2A 1.0 section 8.4): a JWS (RFC 7515, flattened, the
// payload detached: the card itself) over the card's RFC 8785 canonical form, ES256 or RS256 by
// OpenSSL. The payload is what the official SDKs sign (@a2a-js/sdk's canonicalizeAgentCard):
// the card without `signatures` and without empty values; tests/node/a2a/a2a_card_signature.mjs
// checks both directions against the SDK and jose.
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/base64url.hpp"
#include "model/sha256.hpp"
#include "parley/a2a.hpp"
#include "parley/canonical_json.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"

namespace parley {

using nlohmann::json;

struct A2aCardSigner::Key {
  explicit Key(EVP_PKEY* p) : pkey(p) {}
  ~Key() { EVP_PKEY_free(pkey); }
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  EVP_PKEY* pkey;
};

namespace {

using CardKey = A2aCardSigner::Key;
constexpr int kMaxHeaderDepth = 4;
constexpr std::size_t kEs256Half = 32;  // r and s of a P-256 signature, each

struct BnFree {
  void operator()(BIGNUM* n) const { BN_free(n); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct SigFree {
  void operator()(ECDSA_SIG* s) const { ECDSA_SIG_free(s); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

// An encrypted PEM is refused rather than prompted for on the terminal.
int noPassphrase(char*, int, int, void*) {
  return 0;
}

// The key's JWS algorithm; ValidationError for any other key.
std::string cardKeyAlgorithm(EVP_PKEY* key) {
  switch (EVP_PKEY_get_base_id(key)) {
    case EVP_PKEY_EC: {
      char group[80] = {};
      std::size_t length = 0;
      if (EVP_PKEY_get_group_name(key, group, sizeof group, &length) != 1 ||
          std::string(group) != "prime256v1")
        throw ValidationError("key", std::string("an EC key on the curve '") + group +
                                         "': ES256 wants P-256 (prime256v1)");
      return "ES256";
    }
    case EVP_PKEY_RSA:
      if (EVP_PKEY_get_bits(key) < 2048)
        throw ValidationError("key", "an RSA key of " + std::to_string(EVP_PKEY_get_bits(key)) +
                                         " bits: RS256 wants 2048 or more");
      return "RS256";
    default:
      throw ValidationError("key", "not an EC P-256 (ES256) or RSA (RS256) key");
  }
}

// A PEM key: a private key, or (wantPrivate false) a public key or the public half of a private
// one.
std::shared_ptr<const CardKey> readCardKey(std::string_view pem, bool wantPrivate) {
  auto read = [&](bool asPrivate) -> EVP_PKEY* {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    if (!bio) return nullptr;
    return asPrivate ? PEM_read_bio_PrivateKey(bio.get(), nullptr, noPassphrase, nullptr)
                     : PEM_read_bio_PUBKEY(bio.get(), nullptr, noPassphrase, nullptr);
  };
  EVP_PKEY* key = wantPrivate ? read(true) : read(false);
  if (!key && !wantPrivate) key = read(true);
  ERR_clear_error();
  if (!key)
    throw ValidationError(
        "key", wantPrivate ? "not a PEM private key (or it is encrypted)" : "not a PEM public key");
  auto owned = std::make_shared<const CardKey>(key);
  cardKeyAlgorithm(key);  // checks its kind
  return owned;
}

std::string bnBytes(EVP_PKEY* key, const char* name, std::size_t width) {
  BIGNUM* raw = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &raw) != 1) {
    ERR_clear_error();
    throw ValidationError("key", std::string("has no ") + name);
  }
  std::unique_ptr<BIGNUM, BnFree> n(raw);
  std::string out(width ? width : static_cast<std::size_t>(BN_num_bytes(n.get())), '\0');
  BN_bn2binpad(n.get(), reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size()));
  return out;
}

// RFC 7638: SHA-256 of the JWK's required members, canonical.
std::string cardKeyThumbprint(EVP_PKEY* key) {
  json jwk;
  if (EVP_PKEY_get_base_id(key) == EVP_PKEY_EC) {
    jwk = {{"crv", "P-256"},
           {"kty", "EC"},
           {"x", detail::base64UrlEncode(bnBytes(key, OSSL_PKEY_PARAM_EC_PUB_X, kEs256Half))},
           {"y", detail::base64UrlEncode(bnBytes(key, OSSL_PKEY_PARAM_EC_PUB_Y, kEs256Half))}};
  } else {
    jwk = {{"e", detail::base64UrlEncode(bnBytes(key, OSSL_PKEY_PARAM_RSA_E, 0))},
           {"kty", "RSA"},
           {"n", detail::base64UrlEncode(bnBytes(key, OSSL_PKEY_PARAM_RSA_N, 0))}};
  }
  return detail::base64UrlEncode(detail::sha256(canonicalJson(jwk)));
}

std::string cardSign(EVP_PKEY* key, const std::string& algorithm, std::string_view input) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  std::size_t length = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(input.data());
  std::string der;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length, data, input.size()) != 1 ||
      (der.resize(length), EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(der.data()),
                                          &length, data, input.size())) != 1) {
    ERR_clear_error();
    throw Error("signing the Agent Card failed (OpenSSL)");
  }
  der.resize(length);
  if (algorithm != "ES256") return der;  // RS256: the PKCS #1 v1.5 signature as it is
  // JWS writes an ECDSA signature as r || s, each 32 bytes (RFC 7518 section 3.4), not DER.
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  std::unique_ptr<ECDSA_SIG, SigFree> sig(d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(length)));
  if (!sig) throw Error("signing the Agent Card failed (an ECDSA signature OpenSSL cannot read)");
  std::string raw(2 * kEs256Half, '\0');
  auto* out = reinterpret_cast<unsigned char*>(raw.data());
  BN_bn2binpad(ECDSA_SIG_get0_r(sig.get()), out, kEs256Half);
  BN_bn2binpad(ECDSA_SIG_get0_s(sig.get()), out + kEs256Half, kEs256Half);
  return raw;
}

bool cardVerify(EVP_PKEY* key, const std::string& algorithm, std::string_view input,
                const std::string& signature) {
  std::string der = signature;
  if (algorithm == "ES256") {
    if (signature.size() != 2 * kEs256Half) return false;
    const auto* raw = reinterpret_cast<const unsigned char*>(signature.data());
    std::unique_ptr<BIGNUM, BnFree> r(BN_bin2bn(raw, kEs256Half, nullptr));
    std::unique_ptr<BIGNUM, BnFree> s(BN_bin2bn(raw + kEs256Half, kEs256Half, nullptr));
    std::unique_ptr<ECDSA_SIG, SigFree> sig(ECDSA_SIG_new());
    if (!r || !s || !sig || ECDSA_SIG_set0(sig.get(), r.get(), s.get()) != 1) return false;
    static_cast<void>(r.release());  // owned by sig now
    static_cast<void>(s.release());
    const int length = i2d_ECDSA_SIG(sig.get(), nullptr);
    if (length <= 0) return false;
    der.assign(static_cast<std::size_t>(length), '\0');
    auto* p = reinterpret_cast<unsigned char*>(der.data());
    i2d_ECDSA_SIG(sig.get(), &p);
  }
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  const bool ok =
      ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(der.data()), der.size(),
                       reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
  ERR_clear_error();
  return ok;
}

// The SDKs' "empty value" rule: null, "", [] and {} are left out, innermost first (an object
// whose members were all empty is then empty itself). nullopt: the value is empty.
std::optional<json> withoutEmpty(const json& value) {
  if (value.is_null() || (value.is_string() && value.get_ref<const std::string&>().empty()))
    return std::nullopt;
  if (value.is_array()) {
    json out = json::array();
    for (const auto& item : value)
      if (auto kept = withoutEmpty(item)) out.push_back(std::move(*kept));
    if (out.empty()) return std::nullopt;
    return out;
  }
  if (value.is_object()) {
    json out = json::object();
    for (const auto& [key, item] : value.items())
      if (auto kept = withoutEmpty(item)) out[key] = std::move(*kept);
    if (out.empty()) return std::nullopt;
    return out;
  }
  return value;
}

json cardWithoutSignatures(const json& card) {
  json rest = card;
  if (rest.is_object()) rest.erase("signatures");
  return rest;
}

std::string capText(std::size_t n, const char* noun, std::size_t cap, const char* name) {
  return std::to_string(n) + " " + noun + ", over " + std::to_string(cap) +
         " (A2aCardSignatureLimits::" + name + ")";
}

}  // namespace

std::string a2aCardSigningPayload(const json& card) {
  auto kept = withoutEmpty(cardWithoutSignatures(card));
  return kept ? canonicalJson(*kept) : "{}";
}

std::string a2aKeyThumbprint(std::string_view pem) {
  return cardKeyThumbprint(readCardKey(pem, false)->pkey);
}

A2aCardSigner::A2aCardSigner(std::string_view privateKeyPem, std::string keyId, std::string jku)
    : key_(readCardKey(privateKeyPem, true)),
      keyId_(std::move(keyId)),
      jku_(std::move(jku)),
      algorithm_(cardKeyAlgorithm(key_->pkey)) {
  if (keyId_.empty()) keyId_ = cardKeyThumbprint(key_->pkey);
}

json A2aCardSigner::sign(json card) const {
  json header = {{"alg", algorithm_}, {"kid", keyId_}, {"typ", "JOSE"}};
  if (!jku_.empty()) header["jku"] = jku_;
  const std::string protectedHeader = detail::base64UrlEncode(canonicalJson(header));
  const std::string input =
      protectedHeader + "." + detail::base64UrlEncode(a2aCardSigningPayload(card));
  card["signatures"] = json::array(
      {{{"protected", protectedHeader},
        {"signature", detail::base64UrlEncode(cardSign(key_->pkey, algorithm_, input))}}});
  return card;
}

std::string verifyA2aCardSignature(const json& card, std::string_view publicKeyPem,
                                   const A2aCardSignatureLimits& limits) {
  const auto key = readCardKey(publicKeyPem, false);
  const std::string algorithm = cardKeyAlgorithm(key->pkey);
  const std::string thumbprint = cardKeyThumbprint(key->pkey);
  if (!card.is_object() || !card.contains("signatures") || card["signatures"].is_null() ||
      (card["signatures"].is_array() && card["signatures"].empty()))
    throw ProtocolError(
        "the card is not signed (no `signatures`), and a signature by the "
        "configured public key is required");
  const json& signatures = card["signatures"];
  if (!signatures.is_array()) throw ProtocolError("the card's `signatures` is not an array");
  if (signatures.size() > limits.maxSignatures)
    throw ProtocolError("the card has " + capText(signatures.size(), "signatures",
                                                  limits.maxSignatures, "maxSignatures"));
  // The SDKs' payload first; a signer that kept empty values signed the card as it is.
  std::vector<std::string> payloads{a2aCardSigningPayload(card)};
  const std::string asSent = canonicalJson(cardWithoutSignatures(card));
  if (asSent != payloads.front()) payloads.push_back(asSent);

  std::vector<std::string> reasons;
  for (std::size_t i = 0; i < signatures.size(); ++i) {
    const std::string where = "signatures[" + std::to_string(i) + "]";
    const json& entry = signatures[i];
    if (!entry.is_object() || !entry.contains("protected") || !entry["protected"].is_string() ||
        !entry.contains("signature") || !entry["signature"].is_string()) {
      reasons.push_back(where + " has no `protected` and `signature` strings");
      continue;
    }
    const auto& protectedHeader = entry["protected"].get_ref<const std::string&>();
    const auto& signatureText = entry["signature"].get_ref<const std::string&>();
    if (protectedHeader.size() > limits.maxProtectedHeaderBytes)
      throw ProtocolError(where + ".protected: " +
                          capText(protectedHeader.size(), "bytes", limits.maxProtectedHeaderBytes,
                                  "maxProtectedHeaderBytes"));
    if (signatureText.size() > limits.maxSignatureBytes)
      throw ProtocolError(
          where + ".signature: " +
          capText(signatureText.size(), "bytes", limits.maxSignatureBytes, "maxSignatureBytes"));
    const auto headerText = detail::base64UrlDecode(protectedHeader);
    const json header =
        headerText ? parseJson(*headerText, {kMaxHeaderDepth}, false) : json(nullptr);
    if (!header.is_object() || !header.contains("alg") || !header["alg"].is_string()) {
      reasons.push_back(where + ": its protected header is not base64url JSON with an `alg`");
      continue;
    }
    const std::string alg = header["alg"];
    std::string kid =
        header.contains("kid") && header["kid"].is_string() ? header["kid"].get<std::string>() : "";
    if (header.contains("crit")) {
      reasons.push_back(where + ": its header names critical extensions (`crit`) not understood");
      continue;
    }
    if (alg != algorithm) {
      reasons.push_back(where + " is " + alg + " (kid '" + kid + "'), the key is " + algorithm);
      continue;
    }
    const auto signature = detail::base64UrlDecode(signatureText);
    if (!signature) {
      reasons.push_back(where + ": its `signature` is not base64url");
      continue;
    }
    for (const auto& payload : payloads)
      if (cardVerify(key->pkey, alg, protectedHeader + "." + detail::base64UrlEncode(payload),
                     *signature))
        return kid;
    if (kid == thumbprint)
      reasons.push_back(where + " names this key (kid '" + kid +
                        "') but does not match the card: the card was changed after it was "
                        "signed");
    else
      reasons.push_back(where + " was signed by another key (kid '" + kid +
                        "'; the configured key's is '" + thumbprint +
                        "'), or the card was changed since");
  }
  std::string text = "no signature of the card verifies with the configured public key: ";
  for (std::size_t i = 0; i < reasons.size(); ++i)
    text += (i ? "; " : "") + reasons[i];
  throw ProtocolError(text);
}

}  // namespace parley
