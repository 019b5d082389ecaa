// BPE throughput and vocabulary load time. Run through bench/tokens/run.sh, which builds the
// corpora and measures the npm peers in the same run; alone:
//   PARLEY_BENCH_CORPUS_DIR=DIR tokens_bench   (DIR holds mixed.txt and prose.txt)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "parley/bpe.hpp"
#include "parley/tokens.hpp"

namespace {

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path vocabularyFile(const std::string& name) {
  for (const auto& dir : parley::vocabularySearchPath()) {
    if (std::filesystem::exists(dir / (name + ".tiktoken"))) return dir / (name + ".tiktoken");
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> encodings = {"cl100k_base", "o200k_base"};
  static std::vector<std::pair<std::string, std::string>> corpora;
  if (const char* dir = std::getenv("PARLEY_BENCH_CORPUS_DIR")) {
    for (const char* name : {"mixed.txt", "prose.txt"}) {
      std::filesystem::path p = std::filesystem::path(dir) / name;
      if (std::filesystem::exists(p)) corpora.emplace_back(name, readFile(p));
    }
  }
  if (corpora.empty()) {
    std::string text;
    for (int i = 0; i < 20000; ++i) {
      text += "The quick brown fox doesn't jump over the lazy dog " + std::to_string(i) + ".\n";
    }
    corpora.emplace_back("builtin-prose", text);
  }
  for (const std::string& name : encodings) {
    const std::filesystem::path file = vocabularyFile(name);
    if (file.empty()) continue;
    const parley::EncodingSpec spec = *parley::findEncodingSpec(name);
    benchmark::RegisterBenchmark(("load/" + name).c_str(), [spec, file](benchmark::State& state) {
      for (auto _ : state) {
        auto encoding = parley::Encoding::fromRankFile(spec, file);
        benchmark::DoNotOptimize(encoding);
      }
    })->Unit(benchmark::kMillisecond);
    auto encoding = parley::loadEncoding(name);
    for (const auto& [corpusName, text] : corpora) {
      benchmark::RegisterBenchmark(
          ("encode/" + name + "/" + corpusName).c_str(),
          [encoding, &text = text](benchmark::State& state) {
            size_t tokens = 0;
            for (auto _ : state) {
              std::vector<parley::TokenId> ids = encoding->encode(text);
              tokens = ids.size();
              benchmark::DoNotOptimize(ids.data());
            }
            state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
            state.counters["tokens"] = static_cast<double>(tokens);
          })
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
