#ifndef LOCALSGD_COORDINATOR_HTML_TEXT_H_
#define LOCALSGD_COORDINATOR_HTML_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace localsgd {

// Text for the status page's HTML (the page and its charts).

// `text` with &, <, >, " and ' escaped.
std::string Esc(absl::string_view text);
// `value` with `digits` decimals ("NaN", "inf", "-inf" as such).
std::string Fixed(double value, int digits);
// "45 s", "3 min 05 s", "2 h 07 min"; "-" for a negative or non-finite span.
std::string Span(double seconds);
// "812 B", "12.3 kB", "4.56 MB", "1.23 GB".
std::string Bytes(double bytes);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_HTML_TEXT_H_
