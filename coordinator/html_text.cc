#include "coordinator/html_text.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace localsgd {

std::string Esc(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Fixed(double value, int digits) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.*f", digits, value);
}

std::string Span(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrCat(s, " s");
  if (s < 3600) return absl::StrFormat("%d min %02d s", s / 60, s % 60);
  return absl::StrFormat("%d h %02d min", s / 3600, s / 60 % 60);
}

std::string Bytes(double bytes) {
  if (bytes >= 1e9) return absl::StrCat(Fixed(bytes / 1e9, 2), " GB");
  if (bytes >= 1e6) return absl::StrCat(Fixed(bytes / 1e6, 2), " MB");
  if (bytes >= 1e3) return absl::StrCat(Fixed(bytes / 1e3, 1), " kB");
  return absl::StrCat(Fixed(bytes, 0), " B");
}

}  // namespace localsgd
