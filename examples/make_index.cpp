// make_index: writes the index (a JSON array of paths relative to the root) and, for an
// ImageFolder layout, the classes file, for a directory of samples.
//
//   make_index --root /data/imagenet/train --ext .JPEG --index train.json --classes classes.json
#include <conveyor/file/index.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv)
{
    CLI::App app{"Write an index file (JSON array of relative paths) and a classes file for a directory"};
    std::string root, index_out, classes_out;
    std::vector<std::string> exts;
    app.add_option("--root", root, "directory to index (walked recursively, sorted)")->required();
    app.add_option("--ext", exts, "keep only these extensions, e.g. --ext .JPEG .png (case-insensitive)");
    app.add_option("--index", index_out, "where to write the index (default: ROOT/index.json)");
    app.add_option("--classes", classes_out,
                   "also write a classes file {\"dir\": {\"id\": N, \"name\": \"dir\"}} from the first-level "
                   "directories (ImageFolder layout)");
    CLI11_PARSE(app, argc, argv);
    if (index_out.empty()) index_out = root + "/index.json";

    try {
        const auto t0 = std::chrono::steady_clock::now();
        namespace cf = conveyor::file;
        const cf::listing l = cf::walk(root, {.extensions = exts, .labels = !classes_out.empty()});
        // The index must not list itself when written inside the root.
        cf::listing indexed = l;
        std::erase_if(indexed.entries, [&](const cf::entry& e) { return (l.root / e.path) == index_out; });
        cf::write_index(indexed, index_out);
        if (!classes_out.empty()) cf::write_classes(l, classes_out);
        std::uint64_t bytes = 0;
        for (const auto& e : indexed.entries) bytes += static_cast<std::uint64_t>(e.size);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "make_index: %zu files (%.2f GB) under %s -> %s", indexed.size(), bytes / 1e9, root.c_str(),
                     index_out.c_str());
        if (!classes_out.empty()) std::fprintf(stderr, "; %zu classes -> %s", l.classes.size(), classes_out.c_str());
        std::fprintf(stderr, " (%.2f s)\n", s);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "make_index: %s\n", e.what());
        return 1;
    }
}
