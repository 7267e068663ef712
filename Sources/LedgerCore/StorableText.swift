/// Text another party wrote (a webhook receiver's answer, a server's error message), made safe to
/// store and show: PostgreSQL `text` and `jsonb` refuse NUL, and control characters in an admin
/// page or a log line can forge or hide what follows. Every C0 control except tab, newline and
/// carriage return, and DEL, become U+FFFD; bytes that are not UTF-8 decode to U+FFFD; at most
/// `limit` characters are kept.
public enum StorableText {
    public static func from<Bytes: Collection>(_ bytes: Bytes, limit: Int) -> String where Bytes.Element == UInt8 {
        clean(String(decoding: bytes, as: UTF8.self), limit: limit)
    }

    public static func clean(_ text: String, limit: Int) -> String {
        var out = String.UnicodeScalarView()
        var kept = 0
        for scalar in text.unicodeScalars {
            guard kept < limit else { break }
            let v = scalar.value
            let control = (v < 0x20 && v != 0x09 && v != 0x0A && v != 0x0D) || v == 0x7F
            out.append(control ? "\u{FFFD}" : scalar)
            kept += 1
        }
        return String(out)
    }
}
