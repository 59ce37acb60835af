// Replays a fuzz target's corpus without libFuzzer: every file given, or every file in each
// directory given, is passed once to LLVMFuzzerTestOneInput. Used by non-clang builds so
// ctest checks the committed corpus everywhere.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t count = 0;
    for (int i = 1; i < argc; ++i) {
        const std::filesystem::path p(argv[i]);
        if (std::filesystem::is_directory(p)) {
            for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
                if (e.is_regular_file()) {
                    run_file(e.path());
                    ++count;
                }
            }
        } else {
            run_file(p);
            ++count;
        }
    }
    if (count == 0) {
        std::cerr << "replay: no corpus files found\n";
        return 1;
    }
    std::cout << "replay: " << count << " inputs ran\n";
    return 0;
}
