#include "attnscope/core/AttentionShape.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace attnscope {
namespace {

bool parseInt(const std::string& v, int64_t lo, int64_t hi, int64_t* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || x < lo || x > hi) return false;
  *out = x;
  return true;
}

bool goodText(const std::string& v) {
  for (const char c : v) {
    if (c <= ' ' || c == '=' || c > '~') return false;
  }
  return v.size() <= 128;
}

}  // namespace

bool AttentionShape::complete() const {
  return batch > 0 && heads > 0 && qLen > 0 && kvLen > 0 && headDim > 0;
}

std::string AttentionShape::implementation() const {
  if (op.find("scaled_dot_product") != std::string::npos)
    return backend.empty() ? "sdpa" : "sdpa (" + backend + ")";
  if (op.empty()) return "";
  return "eager (matmul-softmax-matmul)";
}

std::string AttentionShape::describeShapes() const {
  std::ostringstream s;
  const auto size = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("?"); };
  s << "batch " << size(batch) << ", heads " << size(heads);
  if (kvHeads > 0 && kvHeads != heads) s << " (kv " << kvHeads << ")";
  s << ", q " << size(qLen) << ", kv " << size(kvLen) << ", head dim " << size(headDim);
  if (!dtype.empty()) s << ", " << dtype;
  if (causal == 1) s << ", causal";
  if (mask == "tensor") s << ", mask tensor";
  if (dropout >= 0) s << ", dropout " << dropout;
  return s.str();
}

std::string AttentionShape::encode() const {
  std::ostringstream s;
  s << "op=" << (op.empty() ? "-" : op) << " backend=" << (backend.empty() ? "-" : backend)
    << " batch=" << batch << " heads=" << heads << " kv_heads=" << kvHeads << " q_len=" << qLen
    << " kv_len=" << kvLen << " head_dim=" << headDim << " dtype=" << (dtype.empty() ? "-" : dtype)
    << " causal=" << causal << " mask=" << (mask.empty() ? "-" : mask);
  char dropoutText[32];
  std::snprintf(dropoutText, sizeof dropoutText, "%.9g", dropout);
  s << " dropout=" << dropoutText << " changes=" << changes;
  return s.str();
}

std::string attentionShapeKey(const std::string& layer) { return "attention_shape." + layer; }

bool parseAttentionShape(const std::string& text, AttentionShape* out, std::string* error) {
  AttentionShape a;
  std::istringstream in(text);
  std::string item;
  bool any = false;
  const auto fail = [&](const std::string& why) {
    if (error != nullptr) *error = "attention shape \"" + text.substr(0, 200) + "\": " + why;
    return false;
  };
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return fail("\"" + item + "\" is not key=value");
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    const std::string text = value == "-" ? std::string() : value;
    int64_t n = 0;
    const auto size = [&](int64_t* field) {
      if (!parseInt(value, 0, int64_t{1} << 40, &n)) return false;
      *field = n;
      return true;
    };
    bool ok = true;
    if (key == "op" || key == "backend" || key == "dtype" || key == "mask") {
      ok = goodText(value);
      (key == "op"        ? a.op
       : key == "backend" ? a.backend
       : key == "dtype"   ? a.dtype
                          : a.mask) = text;
    } else if (key == "batch") {
      ok = size(&a.batch);
    } else if (key == "heads") {
      ok = size(&a.heads);
    } else if (key == "kv_heads") {
      ok = size(&a.kvHeads);
    } else if (key == "q_len") {
      ok = size(&a.qLen);
    } else if (key == "kv_len") {
      ok = size(&a.kvLen);
    } else if (key == "head_dim") {
      ok = size(&a.headDim);
    } else if (key == "changes") {
      ok = parseInt(value, 0, INT64_MAX, &n);
      a.changes = static_cast<uint64_t>(n);
    } else if (key == "causal") {
      ok = parseInt(value, -1, 1, &n);
      a.causal = static_cast<int>(n);
    } else if (key == "dropout") {
      char* end = nullptr;
      a.dropout = std::strtod(value.c_str(), &end);
      ok =
          !value.empty() && *end == '\0' && (a.dropout == -1 || (a.dropout >= 0 && a.dropout <= 1));
    } else {
      continue;  // a newer writer's key
    }
    if (!ok) return fail(key + "=\"" + value + "\" is out of range or malformed");
    any = true;
  }
  if (!any) return fail("no key=value pair");
  *out = a;
  return true;
}

}  // namespace attnscope
