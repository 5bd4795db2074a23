/**
 * What the {@code Alias} classes of both Nailgun API generations share: a name for a nail
 * class, with a description.
 */
package ngw.api;

/** See the file comment. */
public class AliasBase implements Comparable<Object> {
    private final String name;
    private final String description;
    private final Class<?> clazz;

    protected AliasBase(String name, String description, Class<?> clazz) {
        this.name = name;
        this.description = description == null ? "" : description;
        this.clazz = clazz;
    }

    public Class<?> getAliasedClass() {
        return clazz;
    }

    public String getName() {
        return name;
    }

    public String getDescription() {
        return description;
    }

    @Override
    public int hashCode() {
        return name.hashCode();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof AliasBase a && a.name.equals(name);
    }

    @Override
    public int compareTo(Object o) {
        return name.compareTo(((AliasBase) o).name);
    }
}
