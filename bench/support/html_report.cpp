// bench/support/html_report.cpp — the self-contained HTML page (see report.hpp).
#include "support/report.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace conveyor::bench {

namespace {

std::string id_attribute(std::string_view id)
{
    return id.empty() ? std::string() : " id=\"" + bench::html_escape(id) + "\"";
}

/// Whether a table cell reads as a number (right-aligned then): 1234, -0.5, 12.3%, 1.2e6.
bool numeric_cell(const std::string& v)
{
    if (v.empty()) return false;
    const auto first = static_cast<unsigned char>(v.front());
    if (!std::isdigit(first) && first != '-' && first != '+' && first != '.') return false;
    const char* begin = v.c_str();
    char* end = nullptr;
    (void)std::strtod(begin, &end);
    if (end == begin) return false;
    if (*end == '%') ++end;
    return *end == '\0';
}

constexpr const char* style = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #222;
       max-width: 980px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
figure { margin: 1.2em 0; }
figure svg { display: block; width: 100%; max-width: 760px; height: auto; }
figcaption { color: #555; font-size: .9em; margin-top: .3em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
thead th { background: #f4f4f4; }
table.facts th { font-weight: 600; background: #fafafa; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; border: 1px solid #e3e3e3; padding: .8em; overflow: auto; font-size: .85em; }
)";

} // namespace

html_report::html_report(std::string title) : title_(std::move(title)) {}

void html_report::add_heading(std::string_view text)
{
    body_ += "<h2>" + html_escape(text) + "</h2>\n";
}

void html_report::add_paragraph(std::string_view text)
{
    body_ += "<p>" + html_escape(text) + "</p>\n";
}

void html_report::add_plot(std::string_view id, const line_plot& p)
{
    body_ += "<figure" + id_attribute(id) + ">\n" + svg_line_plot(p) + "<figcaption>" + html_escape(p.title) +
             "</figcaption>\n</figure>\n";
}

void html_report::add_plot(std::string_view id, const share_plot& p)
{
    body_ += "<figure" + id_attribute(id) + ">\n" + svg_share_plot(p) + "<figcaption>" + html_escape(p.title) +
             "</figcaption>\n</figure>\n";
}

void html_report::add_table(std::string_view id, const std::vector<std::string>& header,
                                          const std::vector<std::vector<std::string>>& rows)
{
    std::string s = "<table" + id_attribute(id) + ">\n";
    std::size_t columns = header.size();
    for (const auto& row : rows) columns = std::max(columns, row.size());
    if (!header.empty()) {
        s += "<thead><tr>";
        for (std::size_t c = 0; c < columns; ++c) s += "<th>" + (c < header.size() ? html_escape(header[c]) : "") + "</th>";
        s += "</tr></thead>\n";
    }
    s += "<tbody>\n";
    for (const auto& row : rows) {
        s += "<tr>";
        for (std::size_t c = 0; c < columns; ++c) {
            const std::string cell = c < row.size() ? row[c] : std::string();
            s += (numeric_cell(cell) ? "<td class=\"n\">" : "<td>") + html_escape(cell) + "</td>";
        }
        s += "</tr>\n";
    }
    body_ += s + "</tbody>\n</table>\n";
}

void html_report::add_facts(std::string_view id, const std::vector<std::pair<std::string, std::string>>& facts)
{
    std::string s = "<table class=\"facts\"" + id_attribute(id) + ">\n<tbody>\n";
    for (const auto& [name, value] : facts)
        s += "<tr><th scope=\"row\">" + html_escape(name) + "</th><td>" + html_escape(value) + "</td></tr>\n";
    body_ += s + "</tbody>\n</table>\n";
}

void html_report::add_code(std::string_view id, std::string_view text)
{
    body_ += "<pre" + id_attribute(id) + "><code>" + html_escape(text) + "</code></pre>\n";
}

std::string html_report::str() const
{
    std::string doc = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>";
    doc += html_escape(title_) + "</title>\n<style>" + style + "</style>\n</head>\n<body>\n";
    doc += "<h1>" + html_escape(title_) + "</h1>\n" + body_ + "</body>\n</html>\n";
    return doc;
}

void html_report::write(const std::filesystem::path& file) const
{
    std::error_code ec;
    const auto parent = file.parent_path();
    if (!parent.empty()) {
        std::filesystem::create_directories(parent, ec);
        if (ec) throw std::runtime_error("cannot create the folder " + parent.string() + " for the report: " + ec.message());
    }
    const std::string doc = str();
    std::FILE* out = std::fopen(file.c_str(), "wb");
    if (!out) throw std::runtime_error("cannot write the report " + file.string() + ": " + std::strerror(errno));
    const std::size_t written = std::fwrite(doc.data(), 1, doc.size(), out);
    int error = written == doc.size() ? 0 : errno;
    if (std::fclose(out) != 0 && !error) error = errno;
    if (written != doc.size() || error)
        throw std::runtime_error("cannot write the report " + file.string() + ": " + std::strerror(error ? error : EIO));
}

} // namespace conveyor::bench
