#include "service/chat_page.hpp"

namespace parley::service {

namespace {
constexpr std::string_view kPage = R"page(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>parley</title></head>
<body><p>parley serve</p></body></html>
)page";
}

std::string_view chatPage() {
  return kPage;
}

}  // namespace parley::service
