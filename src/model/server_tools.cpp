#include "parley/server_tools.hpp"

#include <algorithm>
#include <array>

#include "parley/message.hpp"
#include "parley/part.hpp"

namespace parley {

namespace {

using nlohmann::json;

const json* extraArray(const Message& message, std::string_view key) {
  auto it = message.extra.find(key);
  return it != message.extra.end() && it->is_array() ? &*it : nullptr;
}

std::string stringOf(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Responses items named "*_call" that the client runs, not the provider.
constexpr std::array<std::string_view, 6> kClientRunItems = {"function_call",    "custom_tool_call",
                                                             "local_shell_call", "shell_call",
                                                             "apply_patch_call", "computer_call"};

bool isServerItem(std::string_view type) {
  return type.size() > 5 && type.ends_with("_call") &&
         std::find(kClientRunItems.begin(), kClientRunItems.end(), type) == kClientRunItems.end();
}

}  // namespace

std::vector<ServerToolCall> serverToolCallsOf(const Message& message) {
  std::vector<ServerToolCall> calls;
  if (message.role != Role::Assistant) return calls;
  if (const json* blocks = extraArray(message, kAnthropicContent)) {
    for (const json& block : *blocks) {
      if (!block.is_object()) continue;
      const std::string type = stringOf(block, "type");
      if (type == "server_tool_use" || type == "mcp_tool_use") {
        ServerToolCall call;
        call.id = stringOf(block, "id");
        call.name = stringOf(block, "name");
        auto input = block.find("input");
        call.input = input != block.end() && !input->is_null() ? input->dump() : "{}";
        calls.push_back(std::move(call));
      } else if (type != "tool_result" && type.ends_with("_tool_result")) {
        const std::string id = stringOf(block, "tool_use_id");
        for (ServerToolCall& call : calls) {
          if (call.id == id) call.result = block;
        }
      }
    }
  }
  if (const json* items = extraArray(message, kResponseOutput)) {
    for (const json& item : *items) {
      if (!item.is_object()) continue;
      const std::string type = stringOf(item, "type");
      if (!isServerItem(type)) continue;
      ServerToolCall call;
      call.id = stringOf(item, "id");
      call.name = type.substr(0, type.size() - 5);
      call.status = stringOf(item, "status");
      // What it was given: the item less its identity and its outcome.
      json input = json::object();
      for (const auto& [key, value] : item.items()) {
        if (key == "id" || key == "type" || key == "status" || key == "result" || key == "output" ||
            key == "outputs" || key == "results" || key == "error") {
          continue;
        }
        input[key] = value;
      }
      call.input = input.dump();
      call.result = item;
      calls.push_back(std::move(call));
    }
  }
  return calls;
}

bool hasProviderContent(const Message& message) {
  if (message.role != Role::Assistant) return false;
  const json* blocks = extraArray(message, kAnthropicContent);
  const json* items = extraArray(message, kResponseOutput);
  return (blocks && !blocks->empty()) || (items && !items->empty());
}

std::vector<Part> generatedImagesOf(const Message& message) {
  std::vector<Part> images;
  if (message.role != Role::Assistant) return images;
  auto add = [&](std::string mimeType, const std::string& base64) {
    std::optional<std::string> bytes = base64Decode(base64);
    if (!bytes || bytes->empty()) return;
    Part part;
    part.kind = PartKind::Image;
    part.bytes = std::move(*bytes);
    part.mimeType = std::move(mimeType);
    images.push_back(std::move(part));
  };
  if (const json* parts = extraArray(message, kGeminiParts)) {
    for (const json& part : *parts) {
      if (!part.is_object() || part.value("thought", false)) continue;
      auto data = part.find("inlineData");
      if (data == part.end() || !data->is_object()) continue;
      const std::string mimeType = stringOf(*data, "mimeType");
      if (mimeType.rfind("image/", 0) == 0) add(mimeType, stringOf(*data, "data"));
    }
  }
  if (const json* items = extraArray(message, kResponseOutput)) {
    for (const json& item : *items) {
      if (!item.is_object() || stringOf(item, "type") != "image_generation_call") continue;
      std::string format = stringOf(item, "output_format");
      if (format.empty()) format = "png";
      add("image/" + format, stringOf(item, "result"));
    }
  }
  return images;
}

std::size_t webSearchCount(const Message& message) {
  const std::vector<ServerToolCall> calls = serverToolCallsOf(message);
  std::size_t count = static_cast<std::size_t>(std::count_if(
      calls.begin(), calls.end(), [](const ServerToolCall& c) { return c.name == "web_search"; }));
  if (auto gemini = message.extra.find(kGeminiMetadata);
      gemini != message.extra.end() && gemini->is_object()) {
    if (auto grounding = gemini->find("groundingMetadata");
        grounding != gemini->end() && grounding->is_object()) {
      if (auto queries = grounding->find("webSearchQueries");
          queries != grounding->end() && queries->is_array()) {
        count += queries->size();
      }
    }
  }
  return count;
}

}  // namespace parley
