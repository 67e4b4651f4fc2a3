// conveyor/s3/detail/impl/config_files.ipp — the files the credentials chain reads: the
// INI dialect of the shared AWS config and credentials files, and the JSON credentials
// file. Part of conveyor/s3/impl/config.ipp (included from it, inside its
// `conveyor::s3::detail`, after the error and text helpers it uses); not a header of its own.
#ifndef CONVEYOR_S3_DETAIL_IMPL_CONFIG_FILES_IPP
#define CONVEYOR_S3_DETAIL_IMPL_CONFIG_FILES_IPP
// ---------------------------------------------------------------------------------------
// The INI dialect of ~/.aws/credentials and ~/.aws/config (as botocore and the SDKs read
// it): `[section]` headers; `key = value` properties (keys without regard to case);
// whole-line comments starting with '#' or ';', also indented; inline comments where '#'
// or ';' follows whitespace; a property with an empty value opens a sub-section whose
// indented `key = value` lines are stored as "parent.key" (`s3 =` / `  endpoint_url = ...`);
// other indented lines continue the previous value (a value conveyor reads must not have
// any: see profile_source::get). Any other line without '=' is an error naming the line,
// as in botocore. Repeated sections merge and a repeated key keeps its last value.
// Boost.PropertyTree's ini_parser is not used: it flattens sub-sections into their
// profile, and fails on two sub-sections with the same key or a repeated section, all of
// which real files have.

struct ini_entry {
    std::string value;
    int line = 0;
    int continued = 0; ///< the first indented line joined to the value, or 0
};

struct ini_section {
    std::map<std::string, ini_entry, std::less<>> keys;
};

struct ini_file {
    std::string path;
    bool exists = false;
    std::map<std::string, ini_section, std::less<>> sections; ///< by name as written (trimmed)
};

/// `v` (text after '=') without an inline comment, trimmed.
CONVEYOR_DECL std::string_view strip_inline_comment(std::string_view v) noexcept
{
    for (std::size_t i = 1; i < v.size(); ++i)
        if ((v[i] == '#' || v[i] == ';') && (v[i - 1] == ' ' || v[i - 1] == '\t')) {
            v = v.substr(0, i);
            break;
        }
    return trim(v);
}

/// Parses `text` read from `path`. Errors name the file and line, never the line's text
/// (it may hold a secret).
CONVEYOR_DECL ini_file parse_ini(std::string path, std::string_view text)
{
    ini_file f;
    f.path = std::move(path);
    f.exists = true;
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3); // a UTF-8 BOM, as Windows editors write
    auto fail = [&](int line, const char* why) { throw_invalid(f.path, "line " + std::to_string(line) + ": " + why); };

    ini_section* section = nullptr;
    std::string property;          // the last top-level key of `section`, "" before one
    bool property_opens_sub = false; // its value was empty: indented lines are sub-properties
    int line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);

        const auto t = trim(line);
        if (t.empty() || t.front() == '#' || t.front() == ';') continue;
        const bool indented = line.front() == ' ' || line.front() == '\t';

        if (indented && section && !property.empty()) {
            if (property_opens_sub) {
                const auto eq = t.find('=');
                if (eq == std::string_view::npos)
                    fail(line_no, "expected 'key = value' in a sub-section (the indented lines after 'name =')");
                const auto key = lower(trim(t.substr(0, eq)));
                if (key.empty()) fail(line_no, "a sub-section property has no name before '='");
                section->keys[property + "." + key] = {std::string(strip_inline_comment(t.substr(eq + 1))), line_no};
            } else {
                // Joined as configparser does; see profile_source::get.
                auto& e = section->keys[property];
                e.value += '\n';
                e.value += strip_inline_comment(t);
                if (!e.continued) e.continued = line_no;
            }
            continue;
        }

        if (t.front() == '[') {
            const auto close = t.find(']');
            if (close == std::string_view::npos) fail(line_no, "a section header has no closing ']'");
            const auto rest = trim(t.substr(close + 1));
            if (!rest.empty() && rest.front() != '#' && rest.front() != ';')
                fail(line_no, "unexpected text after a section header");
            const auto name = trim(t.substr(1, close - 1));
            if (name.empty()) fail(line_no, "a section header has no name");
            section = &f.sections[std::string(name)];
            property.clear();
            continue;
        }

        const auto eq = t.find('=');
        if (eq == std::string_view::npos) fail(line_no, "expected a [section] header, 'key = value' or a comment");
        if (!section) fail(line_no, "a property comes before any [section] header");
        auto key = lower(trim(t.substr(0, eq)));
        if (key.empty()) fail(line_no, "a property has no name before '='");
        auto value = strip_inline_comment(t.substr(eq + 1));
        property = key;
        property_opens_sub = value.empty();
        section->keys[std::move(key)] = {std::string(value), line_no};
    }
    return f;
}

/// Reads and parses the INI file at `path`; `exists` is false (and nothing parsed) when
/// there is no such file or no path.
CONVEYOR_DECL ini_file load_ini(const std::string& path, const char* what)
{
    std::string text;
    if (path.empty() || !read_text_file(path, text, what)) {
        ini_file f;
        f.path = path;
        return f;
    }
    return parse_ini(path, text);
}

/// A value found in a profile, with where it was found (for messages).
struct profile_value {
    std::string value;
    std::string file;
    int line = 0;
    std::string where() const { return file + " line " + std::to_string(line); }
};

/** One profile of the shared credentials and config files.

    The files are read when the first value is asked for: a user who sets everything
    explicitly never depends on them. Values of the credentials file win over those of
    the config file, key by key (as botocore merges them). */
class profile_source {
public:
    explicit profile_source(const std::string& explicit_name, std::string named_by = "named in the options")
    {
        if (!explicit_name.empty()) {
            name_ = explicit_name;
            named_by_ = std::move(named_by);
        } else if (auto p = env("AWS_PROFILE"); !p.empty()) {
            name_ = std::move(p);
            named_by_ = "named by AWS_PROFILE";
        } else {
            name_ = "default";
        }
    }

    const std::string& name() const noexcept { return name_; }

    /** The value of `key` ("region", "s3.endpoint_url"...) in the profile, if set.

        Every setting conveyor reads takes one line. An indented line after `key = value`
        continues the value (configparser's rule, which botocore follows), so a line meant
        as `key = value` that lost its '=' would silently become part of the value above
        it: a key id, a secret, a region. That is an error naming the file and the line,
        never the text (it may be a secret). */
    std::optional<profile_value> get(std::string_view key)
    {
        load();
        for (const auto& [file, section] : {std::pair{&credentials_, in_credentials_}, std::pair{&config_, in_config_}}) {
            if (!section) continue;
            auto it = section->keys.find(key);
            if (it == section->keys.end() || it->second.value.empty()) continue;
            const ini_entry& e = it->second;
            if (e.continued)
                throw_invalid(file->path, "line " + std::to_string(e.continued) + ": an indented line continues the value of " +
                                              std::string(key) + " from line " + std::to_string(e.line) +
                                              ", which conveyor reads from one line (is an '=' missing, or the line indented "
                                              "by mistake?)");
            return profile_value{e.value, file->path, e.line};
        }
        return std::nullopt;
    }

    /// "~/.aws/credentials and ~/.aws/config" as paths, saying which do not exist.
    std::string files_searched() const
    {
        auto one = [](const ini_file& f, const char* what) {
            if (f.path.empty()) return std::string("no ") + what + " (HOME is not set)";
            return f.path + (f.exists ? "" : " (does not exist)");
        };
        return one(credentials_, "shared credentials file") + " or " + one(config_, "config file");
    }

private:
    void load()
    {
        if (loaded_) return;
        loaded_ = true;
        const auto home = env("HOME");
        auto path_of = [&](const char* var, const char* fallback) {
            auto p = env(var);
            if (!p.empty()) return expand_home(std::move(p));
            return home.empty() ? std::string() : home + fallback;
        };
        credentials_ = load_ini(path_of("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials"), "shared credentials file");
        config_ = load_ini(path_of("AWS_CONFIG_FILE", "/.aws/config"), "config file");

        if (auto it = credentials_.sections.find(name_); it != credentials_.sections.end()) in_credentials_ = &it->second;
        // The config file names profiles "[profile name]"; the default is "[default]", or
        // "[profile default]", which wins when both are there (as in the SDKs).
        for (const auto& [section_name, section] : config_.sections) {
            std::string_view n = section_name;
            if (n.starts_with("profile") && n.size() > 7 && (n[7] == ' ' || n[7] == '\t')) {
                if (trim(n.substr(7)) == name_) in_config_ = &section;
            } else if (n == "default" && name_ == "default" && !in_config_) {
                in_config_ = &section;
            }
        }
        if (!in_credentials_ && !in_config_ && !named_by_.empty())
            throw_invalid("", "profile '" + name_ + "' (" + named_by_ + ") is not in " + files_searched());
    }

    std::string name_;
    std::string named_by_; // "" for the implicit "default"
    bool loaded_ = false;
    ini_file credentials_, config_;
    const ini_section* in_credentials_ = nullptr;
    const ini_section* in_config_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// The seeds' JSON credentials file.

struct json_credentials {
    credentials creds;
    std::string bucket;
    std::string endpoint_url;
};

/// "a number", "an array"...: what a JSON value is, in words (never the value itself).
CONVEYOR_DECL std::string_view json_kind_name(boost::json::kind k) noexcept
{
    switch (k) {
    case boost::json::kind::null: return "null";
    case boost::json::kind::bool_: return "a boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_: return "a number";
    case boost::json::kind::string: return "a string";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
    }
    return "a JSON value";
}

CONVEYOR_DECL json_credentials read_json_credentials(const std::string& path)
{
    std::string text;
    if (!read_text_file(path, text, "credentials file"))
        throw_config_error(std::make_error_code(std::errc::no_such_file_or_directory), path,
                           "the credentials file does not exist");
    boost::json::stream_parser p;
    boost::system::error_code jec;
    const std::size_t used = p.write(text.data(), text.size(), jec);
    if (!jec) p.finish(jec);
    // The parser's message and the byte offset only: never the text around it.
    if (jec) throw_invalid(path, "not valid JSON at byte " + std::to_string(used) + ": " + jec.message());
    const boost::json::value v = p.release();
    const auto* obj = v.if_object();
    if (!obj) throw_invalid(path, "the credentials file holds " + std::string(json_kind_name(v.kind())) + ", not a JSON object");

    auto string_at = [&](std::string_view key, bool required) -> std::string {
        const auto* x = obj->if_contains(key);
        if (!x || (!required && x->is_null())) {
            if (required) throw_invalid(path, "the credentials file has no \"" + std::string(key) + "\"");
            return {};
        }
        if (!x->is_string())
            throw_invalid(path, "\"" + std::string(key) + "\" is " + std::string(json_kind_name(x->kind())) + ", not a string");
        if (required && x->get_string().empty()) throw_invalid(path, "\"" + std::string(key) + "\" is empty");
        return std::string(x->get_string());
    };
    json_credentials j;
    j.creds.access_key_id = string_at("aws_access_key_id", true);
    j.creds.secret_access_key = string_at("aws_secret_access_key", true);
    j.creds.session_token = string_at("aws_session_token", false);
    j.creds.source = "credentials file " + path;
    j.bucket = string_at("bucket_name", false);
    j.endpoint_url = string_at("endpoint_url", false);
    return j;
}

#endif
