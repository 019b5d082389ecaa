// The chat page `parley serve` answers at `/`: one HTML document with its CSS and JavaScript,
// compiled into the binary (no build step, nothing fetched from elsewhere). Internal to
// src/service/.
#pragma once

#include <string_view>

namespace parley::service {

std::string_view chatPage();

}  // namespace parley::service
