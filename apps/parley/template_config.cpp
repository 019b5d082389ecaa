#include "template_config.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "parley/errors.hpp"
#include "parley/toml.hpp"

namespace parley::cli {
namespace {

using nlohmann::json;

std::vector<std::string> strings(const json& value, const std::string& field) {
  if (!value.is_array()) throw ValidationError(field, "must be an array of strings");
  std::vector<std::string> out;
  for (const json& item : value) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      throw ValidationError(field, "must be an array of non-empty strings");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::string text(const json& value, const std::string& field) {
  if (!value.is_string()) throw ValidationError(field, "must be a string");
  return value.get<std::string>();
}

PromptTemplate readOne(const std::string& name, const json& table, const std::string& field) {
  if (!table.is_object()) throw ValidationError(field, "must be a table");
  PromptTemplate t;
  t.name = name;
  for (const auto& [key, value] : table.items()) {
    const std::string at = field + "." + key;
    if (key == "description") {
      t.description = text(value, at);
    } else if (key == "system") {
      t.system = text(value, at);
    } else if (key == "model") {
      t.model = text(value, at);
    } else if (key == "profile") {
      t.profile = text(value, at);
    } else if (key == "prompt") {
      t.prompt = text(value, at);
    } else if (key == "parameters") {
      if (!value.is_object()) throw ValidationError(at, "must be a table");
      t.parameters = value;
    } else if (key == "tools") {
      t.tools = strings(value, at);
    } else if (key == "tools_files") {
      t.toolsFiles = strings(value, at);
    } else if (key == "mcp") {
      t.mcp = strings(value, at);
    } else {
      throw ValidationError(at, "unknown key (description, system, model, profile, prompt, "
                                "parameters, tools, tools_files, mcp)");
    }
  }
  return t;
}

bool bareKey(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
  });
}

std::string tomlString(const std::string& value) {
  std::string out = "\"";
  for (unsigned char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string tomlKey(const std::string& key) {
  return bareKey(key) ? key : tomlString(key);
}

// A JSON value (from a template's parameters) as a TOML value; objects as inline tables.
std::string tomlValue(const json& value) {
  if (value.is_string()) return tomlString(value.get<std::string>());
  if (value.is_boolean() || value.is_number()) return value.dump();
  if (value.is_array()) {
    std::string out = "[";
    for (const json& item : value)
      out += (out.size() > 1 ? ", " : "") + tomlValue(item);
    return out + "]";
  }
  if (value.is_object()) {
    std::string out = "{";
    for (const auto& [key, item] : value.items())
      out += (out.size() > 1 ? ", " : " ") + tomlKey(key) + " = " + tomlValue(item);
    return out + (out.size() > 1 ? " }" : "}");
  }
  throw ValidationError("parameters", "null has no TOML form");
}

std::string tomlStrings(const std::vector<std::string>& values) {
  std::string out = "[";
  for (const std::string& value : values)
    out += (out.size() > 1 ? ", " : "") + tomlString(value);
  return out + "]";
}

}  // namespace

std::vector<PromptTemplate> readTemplates(const std::string& file) {
  std::error_code ignored;
  if (!std::filesystem::exists(file, ignored)) {
    throw ValidationError(file, "no config file here (give one with --config or PARLEY_CONFIG)");
  }
  const json root = readTomlFile(file);
  std::vector<PromptTemplate> out;
  if (!root.contains("templates")) return out;
  const json& templates = root["templates"];
  if (!templates.is_object()) throw ValidationError(file + ": templates", "must be a table");
  for (const auto& [name, table] : templates.items())
    out.push_back(readOne(name, table, file + ": templates." + name));
  std::sort(out.begin(), out.end(),
            [](const PromptTemplate& a, const PromptTemplate& b) { return a.name < b.name; });
  return out;
}

PromptTemplate readTemplate(const std::string& file, const std::string& name) {
  for (PromptTemplate& t : readTemplates(file)) {
    if (t.name == name) return t;
  }
  throw ValidationError(file, "no template \"" + name + "\" (a [templates." + name +
                                  "] table; `parley templates list` shows those there are)");
}

std::string fillPrompt(const std::string& pattern, const std::string& input) {
  if (pattern.empty()) return input;
  std::string out;
  bool used = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '$') {
      out += pattern[i];
    } else if (pattern.compare(i, 2, "$$") == 0) {
      out += '$';
      ++i;
    } else if (pattern.compare(i, 6, "$input") == 0) {
      out += input;
      used = true;
      i += 5;
    } else {
      out += '$';
    }
  }
  if (!used && !input.empty()) out += "\n\n" + input;
  return out;
}

void applyTemplate(const PromptTemplate& t, const TemplatedOptions& options) {
  EndpointArgs& endpoint = *options.endpoint;
  if (endpoint.model.empty()) endpoint.model = t.model;
  if (endpoint.profile.empty()) endpoint.profile = t.profile;
  if (options.system->empty()) *options.system = t.system;
  auto add = [](std::vector<std::string>& to, const std::vector<std::string>& from) {
    for (const std::string& item : from) {
      if (std::find(to.begin(), to.end(), item) == to.end()) to.push_back(item);
    }
  };
  add(*options.toolSets, t.tools);
  add(*options.toolFiles, t.toolsFiles);
  add(*options.mcpServers, t.mcp);
}

PromptTemplate templateOf(const std::string& name, const PromptTemplate& used,
                          const TemplatedOptions& options) {
  PromptTemplate t = used;
  t.name = name;
  t.system = *options.system;
  t.model = options.endpoint->model;
  t.profile = options.endpoint->profile;
  t.tools = *options.toolSets;
  t.toolsFiles = *options.toolFiles;
  t.mcp = *options.mcpServers;
  return t;
}

void addParameters(const PromptTemplate& t, ClientOptions& client) {
  if (!client.defaultParameters.is_object()) client.defaultParameters = json::object();
  for (const auto& [key, value] : t.parameters.items())
    client.defaultParameters[key] = value;
}

std::string templateToToml(const PromptTemplate& t) {
  std::string out = "[templates." + tomlKey(t.name) + "]\n";
  auto line = [&](const char* key, const std::string& value) {
    if (!value.empty()) out += std::string(key) + " = " + tomlString(value) + "\n";
  };
  auto list = [&](const char* key, const std::vector<std::string>& values) {
    if (!values.empty()) out += std::string(key) + " = " + tomlStrings(values) + "\n";
  };
  line("description", t.description);
  line("system", t.system);
  line("profile", t.profile);
  line("model", t.model);
  list("tools", t.tools);
  list("tools_files", t.toolsFiles);
  list("mcp", t.mcp);
  line("prompt", t.prompt);
  if (!t.parameters.empty()) {
    out += "[templates." + tomlKey(t.name) + ".parameters]\n";
    for (const auto& [key, value] : t.parameters.items())
      out += tomlKey(key) + " = " + tomlValue(value) + "\n";
  }
  return out;
}

void saveTemplate(const std::string& file, const PromptTemplate& t) {
  if (t.name.empty()) throw ValidationError("--save-template", "needs a name");
  std::error_code ignored;
  std::string existing;
  if (std::filesystem::exists(file, ignored)) {
    for (const PromptTemplate& other : readTemplates(file)) {
      if (other.name == t.name) {
        throw ValidationError("--save-template", "\"" + t.name + "\" exists in " + file +
                                                     " (remove its table first)");
      }
    }
    std::ifstream in(file, std::ios::binary);
    existing.assign(std::istreambuf_iterator<char>(in), {});
  } else if (const auto folder = std::filesystem::path(file).parent_path(); !folder.empty()) {
    std::filesystem::create_directories(folder);
  }
  const std::string table = templateToToml(t);
  // What is written must read back as this template: a check before the file changes.
  const json written = parseToml(existing + "\n" + table, file);
  if (!written.contains("templates") || !written["templates"].contains(t.name)) {
    throw ValidationError("--save-template", "could not write \"" + t.name + "\"");
  }
  std::ofstream out(file, std::ios::binary | std::ios::app);
  if (!existing.empty() && existing.back() != '\n') out << "\n";
  out << (existing.empty() ? "" : "\n") << table;
  if (!out.flush()) throw ValidationError(file, "could not be written");
}

void addTemplateOptions(CLI::App& cmd, std::string& useName, std::string& saveName) {
  cmd.add_option("-t,--template", useName,
                 "Use the options of a [templates.NAME] table of the config file (the command "
                 "line's own options win)");
  cmd.add_option("--save-template", saveName,
                 "Save this command's options as a [templates.NAME] table of the config file");
}

}  // namespace parley::cli
