// The JSON Canonicalization Scheme (RFC 8785, JCS): one serialisation of a JSON value that a
// signer and a verifier using different JSON libraries both arrive at. What an A2A Agent Card's
// JWS and a JWK thumbprint (RFC 7638) cover (docs/a2a.md, "Signed Agent Card").
//
// Thread-safety: a free function on a value; safe from any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace parley {

// No whitespace; object members sorted by their names' UTF-16 code units; strings with only the
// escapes JSON requires (\" \\ \b \f \n \r \t, other controls as \u00xx in lowercase), every
// other character as UTF-8; numbers as ECMAScript writes a double (integers past 2^53 rounded as
// a double would be). Throws ValidationError for a NaN or infinite number or a string that is
// not UTF-8.
std::string canonicalJson(const nlohmann::json& value);

}  // namespace parley
